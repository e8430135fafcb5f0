"""A Pod object's parts every component reads: its containers in wire order, its name for
messages (``pod_ref``), whether it has finished (``is_live``, the one liveness rule), and
the shape check that keeps malformed objects from crashing anything deeper (the
Kubernetes ``v1.Pod`` JSON form, as the API server sends it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeGuard

from hami_core.errors import InvalidInputError
from hami_core.model.charge import SIDECAR_RESTART_POLICY, init_flags

Pod = Mapping[str, Any]


def containers(pod: Pod) -> Iterator[tuple[Mapping[str, Any], bool, str]]:
    """Yield ``(container, is_init, json_path)``: init containers first, then app
    containers, each in spec order (the order of PROTOCOL.md §3's device list).

    ``is_init`` is True only for a plain init container (``hami_core.model.init_flags``):
    a sidecar (``restartPolicy: Always``) runs beside the app containers and is charged
    and fitted as they are; a plain init container after it still runs to completion,
    beside the sidecars declared before it (``hami_core.model.effective_request``)."""
    spec = pod.get("spec") or {}
    plain = init_flags(pod)
    for i, c in enumerate(spec.get("initContainers") or []):
        yield c, plain[i], f"/spec/initContainers/{i}"
    for i, c in enumerate(spec.get("containers") or []):
        yield c, False, f"/spec/containers/{i}"


#: Kubernetes' terminal pod phases: a pod in one holds no devices, no quota, no node lock.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def is_live(pod: Pod) -> bool:
    """True unless the pod has finished (phase ``Succeeded`` or ``Failed``): the one
    liveness rule of every reader of who holds what (usage, quota, node lock, the device
    plugin's sweeps, the monitor, metrics, ``live_pod_uids``)."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def live_pod_uids(pods: Iterable[Pod]) -> frozenset[str]:
    """The UIDs of the ``pods`` that have not finished (``is_live``): what a node-local
    record of a pod may still be held for (``hami_release``)."""
    return frozenset(
        str((p.get("metadata") or {}).get("uid") or "") for p in pods if is_live(p)
    ) - {""}


def pod_ref(pod: Pod) -> str:
    """``namespace/name`` of a pod, for messages; never raises, so a message about a
    malformed pod can name it (metadata that is not an object reads as none)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        meta = {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name') or meta.get('generateName', '?')}"


def _is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, with a JSON object (a ``dict``) answered without
    the ABC's check (every field of every pod is asked when a cluster is read)."""
    return type(value) is dict or isinstance(value, Mapping)


def check_pod_shape(pod: object) -> None:
    """Check the parts of a Pod object hami reads have the types the Kubernetes API gives
    them, so a malformed object gets a clear error instead of a crash deeper down.

    Raises:
        InvalidInputError: names the field and what it should be.
    """
    if not _is_mapping(pod):
        raise InvalidInputError("the pod must be an object")
    meta = pod.get("metadata")
    if not _is_mapping(meta):
        raise InvalidInputError("pod metadata must be an object")
    for key in ("name", "namespace", "uid", "generateName"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise InvalidInputError(f"pod metadata.{key} must be a string")
    for key in ("annotations", "labels"):
        value = meta.get(key)
        if value is None:
            continue
        if not _is_mapping(value) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise InvalidInputError(f"pod metadata.{key} must map strings to strings")
    spec = pod.get("spec")
    if spec is None:
        return
    if not _is_mapping(spec):
        raise InvalidInputError("pod spec must be an object")
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise InvalidInputError(f"pod spec.{key} must be a list")
        for i, c in enumerate(items):
            if not _is_mapping(c) or not isinstance(c.get("name", ""), str):
                raise InvalidInputError(
                    f"pod spec.{key}[{i}] must be a container object with a name"
                )
            res = c.get("resources")
            if res is not None and not (
                _is_mapping(res)
                and all(res.get(s) is None or _is_mapping(res[s]) for s in ("limits", "requests"))
            ):
                raise InvalidInputError(
                    f"pod spec.{key}[{i}].resources must hold limits and requests objects"
                )
            _check_container_fields(c, f"pod spec.{key}[{i}]")
            policy = c.get("restartPolicy")
            if key == "initContainers" and policy not in (None, SIDECAR_RESTART_POLICY):
                # kubelet honours only "Always" (a sidecar, KEP-753) and the API server
                # refuses anything else: read otherwise, a pod could be charged as one
                # kind and run as the other
                raise InvalidInputError(
                    f"pod spec.initContainers[{i}].restartPolicy {str(policy)[:64]!r} is not "
                    f"valid: an init container's restartPolicy may only be "
                    f"{SIDECAR_RESTART_POLICY!r} (a sidecar) or unset"
                )
    status = pod.get("status")
    if status is None:
        return
    if not _is_mapping(status):
        raise InvalidInputError("pod status must be an object")
    if status.get("phase") is not None and not isinstance(status["phase"], str):
        raise InvalidInputError("pod status.phase must be a string")
    statuses = status.get("initContainerStatuses")
    if statuses is not None and not (
        isinstance(statuses, list) and all(_is_mapping(s) for s in statuses)
    ):
        raise InvalidInputError("pod status.initContainerStatuses must be a list of objects")


def _check_container_fields(c: Mapping[str, Any], where: str) -> None:
    """The container fields beyond ``resources`` that hami reads (``v1.Container``):
    ``env`` (a list of ``EnvVar`` objects with a string ``name``), ``envFrom`` (a list of
    ``EnvFromSource`` objects: a string ``prefix``, ``configMapRef`` / ``secretRef``
    objects), ``volumeMounts`` / ``volumeDevices`` (lists of objects with a string
    ``mountPath`` / ``devicePath``), ``securityContext`` (an object), ``restartPolicy``
    (a string)."""
    env = c.get("env")
    if env is not None:
        if not isinstance(env, list):
            raise InvalidInputError(f"{where}.env must be a list")
        for j, e in enumerate(env):
            if not _is_mapping(e) or not isinstance(e.get("name"), str):
                raise InvalidInputError(f"{where}.env[{j}] must be an object with a string name")
    sources = c.get("envFrom")
    if sources is not None:
        if not isinstance(sources, list):
            raise InvalidInputError(f"{where}.envFrom must be a list")
        for j, src in enumerate(sources):
            if not _is_mapping(src):
                raise InvalidInputError(f"{where}.envFrom[{j}] must be an object")
            if src.get("prefix") is not None and not isinstance(src["prefix"], str):
                raise InvalidInputError(f"{where}.envFrom[{j}].prefix must be a string")
            for ref in ("configMapRef", "secretRef"):
                if src.get(ref) is not None and not _is_mapping(src[ref]):
                    raise InvalidInputError(f"{where}.envFrom[{j}].{ref} must be an object")
    for field, key in (("volumeMounts", "mountPath"), ("volumeDevices", "devicePath")):
        items = c.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            raise InvalidInputError(f"{where}.{field} must be a list")
        for j, m in enumerate(items):
            if not _is_mapping(m) or not isinstance(m.get(key), str):
                raise InvalidInputError(
                    f"{where}.{field}[{j}] must be an object with a string {key}"
                )
    for key, kind, what in (
        ("securityContext", Mapping, "an object"),
        ("restartPolicy", str, "a string"),
    ):
        if c.get(key) is not None and not isinstance(c[key], kind):
            raise InvalidInputError(f"{where}.{key} must be {what}")
