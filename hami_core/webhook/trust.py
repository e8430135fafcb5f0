"""The webhook's trust checks (PROTOCOL.md §6-7): what a pod's author may not write.

Everything the device plugin and the scheduler's accounting believe must come from a
writer the pod's author is not:

- scheduler-owned annotations (PROTOCOL.md §3) on the CREATE and UPDATE of every pod,
  whatever its ``schedulerName`` or labels, unless the request comes from a trusted user
  (the scheduler's or the device plugin's service account, ``userInfo.username``);
- the shim's variables (PROTOCOL.md §7), and every variable a backend's Allocate sets
  (``DeviceTypeInfo.allocate_env``: Ascend's ``ASCEND_VISIBLE_DEVICES`` and
  ``NPU_MEM_QUOTA``, Kunlunxin's ``CXPU_CONTAINER_MEMORY_LIMIT``, ...), in the ``env`` of a
  container that asks for managed devices (the container's own env wins over the device
  plugin's in kubelet), and ``envFrom`` that could carry them. ``envFrom`` names a ConfigMap or Secret whose keys
  cannot be read at admission (and may change later), so it is denied in such a container
  unless its ``prefix`` can form none of those names. ``CUDA_DISABLE_CONTROL`` is an
  administrator's opt-out: allowed only in a namespace labelled
  ``hami.io/disable-control: allow``.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys

#: The shim's variables of PROTOCOL.md §7 (and the handbook's all-device aliases).
SHIM_ENV: Final = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_MEMORY_LIMIT",
        "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_CORE_LIMIT",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "CUDA_OVERSUBSCRIBE",
        "GPU_CORE_UTILIZATION_POLICY",
        "CUDA_DISABLE_CONTROL",
        "HAMI_SHIM_LIMITS_FILE",  # the shim's test override of its limits file
        # MPS mode: the MPS client's share and daemon (NVIDIA's MPS guide, "Environment
        # Variables"); a tenant's own values would raise its share or pick another daemon.
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    }
)
#: Per-device forms: ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` and the like.
SHIM_ENV_PREFIXES: Final = (
    "CUDA_DEVICE_MEMORY_LIMIT_",
    "CUDA_DEVICE_SM_LIMIT_",
    "CUDA_DEVICE_CORE_LIMIT_",
    # the shim's tuning knobs (HAMI_SHIM_RECONCILE_MS=-1 stops charging what NVML sees
    # beyond the hooks); the shim reads them from the limits file when there is one
    "HAMI_SHIM_",
)
DISABLE_CONTROL: Final = keys.DISABLE_CONTROL_ENV
#: Namespace label (set by an administrator) that lets containers set CUDA_DISABLE_CONTROL.
DISABLE_CONTROL_LABEL: Final = keys.DISABLE_CONTROL_LABEL
DISABLE_CONTROL_ALLOW: Final = keys.DISABLE_CONTROL_ALLOW


def is_shim_variable(name: str, allocate_env: Iterable[str] = ()) -> bool:
    """True for a variable the tenant may not set itself: one of PROTOCOL.md §7, or one
    matching a backend's ``allocate_env`` patterns (``DeviceTypeInfo.allocate_env``:
    what its Allocate sets, e.g. Ascend's ``ASCEND_VISIBLE_DEVICES``)."""
    if name in SHIM_ENV or name.startswith(SHIM_ENV_PREFIXES):
        return True
    matcher = _matcher(tuple(allocate_env))
    return matcher is not None and matcher.match(name) is not None


@functools.lru_cache(maxsize=32)
def _matcher(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """The ``fnmatch`` patterns as one compiled regular expression (a pod may carry
    thousands of env entries: one match each, not one per pattern)."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def _head(pattern: str) -> tuple[str, bool]:
    """The literal start of an ``fnmatch`` pattern, and whether anything may follow it."""
    cut = min((i for i in (pattern.find(c) for c in "*?[") if i >= 0), default=-1)
    return (pattern, False) if cut < 0 else (pattern[:cut], True)


def prefix_may_form_shim_variable(prefix: str, allocate_env: Iterable[str] = ()) -> bool:
    """True when ``envFrom`` with this ``prefix`` (keys unknown) could define a shim variable
    (or one of ``allocate_env``): an empty prefix, a prefix of one of the names, or a name
    prefix followed by anything."""
    if not prefix:
        return True
    if any(n.startswith(prefix) for n in (*SHIM_ENV, *SHIM_ENV_PREFIXES)):
        return True
    if prefix.startswith(SHIM_ENV_PREFIXES):
        return True
    for pattern in allocate_env:
        head, open_ended = _head(pattern)
        if head.startswith(prefix) or (open_ended and prefix.startswith(head)):
            return True
    return False


def owned_annotation_keys(manager: BackendManager) -> frozenset[str]:
    """Every pod annotation only the scheduler (and the device plugin) may write:
    PROTOCOL.md §3's keys and every backend's device-list and MIG-instance keys."""
    owned = set(keys.SCHEDULER_OWNED)
    for t in manager.device_types():
        owned |= {t.to_allocate_annotation, t.allocated_annotation}
        if t.mig_annotation:
            owned.add(t.mig_annotation)
    return frozenset(owned)


def changed_owned_annotations(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], owned: Iterable[str]
) -> list[str]:
    """Owned keys that ``new`` adds, changes or removes relative to ``old`` (None on CREATE:
    every owned key present), sorted."""
    new_ann = (new.get("metadata") or {}).get("annotations") or {}
    old_ann = ((old or {}).get("metadata") or {}).get("annotations") or {}
    return sorted(k for k in owned if new_ann.get(k) != old_ann.get(k))


def env_denial(
    container: Mapping[str, Any],
    *,
    allow_disable_control: bool = False,
    allocate_env: Iterable[str] = (),
) -> str | None:
    """Why this (device-asking) container's ``env`` / ``envFrom`` is denied, or None.

    Args:
        container: the container as the pod's author wrote it (before the webhook's own
            additions).
        allow_disable_control: the namespace opted out (``hami.io/disable-control: allow``).
        allocate_env: the installed backends' ``DeviceTypeInfo.allocate_env`` patterns
            (``allocate_env_patterns``), denied like the shim's variables.
    """
    patterns = tuple(allocate_env)
    name = container.get("name")
    for e in container.get("env") or []:
        var = e.get("name") if isinstance(e, Mapping) else None
        if not isinstance(var, str) or not is_shim_variable(var, patterns):
            continue
        if var == DISABLE_CONTROL and allow_disable_control:
            continue
        hint = (
            f"; only a namespace labelled {DISABLE_CONTROL_LABEL}={DISABLE_CONTROL_ALLOW} "
            "(set by an administrator) may turn the limiter off"
            if var == DISABLE_CONTROL
            else ""
        )
        return (
            f"container {name!r}: env {var} is set by the device plugin from the scheduled "
            f"share and may not be set by the pod{hint}"
        )
    for i, source in enumerate(container.get("envFrom") or []):
        if not isinstance(source, Mapping):
            continue
        prefix = source.get("prefix") or ""
        if prefix_may_form_shim_variable(str(prefix), patterns):
            ref = source.get("configMapRef") or source.get("secretRef") or {}
            what = "configMapRef" if "configMapRef" in source else "secretRef"
            return (
                f"container {name!r}: envFrom[{i}] ({what} {ref.get('name')!r}, prefix "
                f"{prefix!r}) could define the device plugin's variables (CUDA_DEVICE_*, "
                "NVIDIA_VISIBLE_DEVICES, ...); use a prefix that cannot form them, e.g. 'APP_'"
            )
    return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def mount_denial(container: Mapping[str, Any], protected: Iterable[str]) -> str | None:
    """Why this (device-asking) container's volumes are denied, or None: a
    ``volumeMounts[].mountPath`` or ``volumeDevices[].devicePath`` at or under one of
    ``protected`` (``protected_path_roots``), normalised (``/etc//ld.so.preload/``,
    ``/usr/local/vgpu/../vgpu/limits``), would cover what the device plugin mounts there.

    A volume at a parent path (``/etc``, ``/usr/local``) is mounted first and covered by
    the device plugin's deeper mounts; an image whose symlinks alias a protected path is
    not seen here (docs/threat-model.md)."""
    roots = tuple(protected)
    name = container.get("name")
    for field, key in (("volumeMounts", "mountPath"), ("volumeDevices", "devicePath")):
        for i, m in enumerate(container.get(field) or []):
            raw = m.get(key) if isinstance(m, Mapping) else None
            if not isinstance(raw, str) or not raw:
                continue
            path = posixpath.normpath("/" + raw.lstrip("/"))
            hit = next((r for r in roots if _under(path, r)), None)
            if hit is not None:
                return (
                    f"container {name!r}: {field}[{i}].{key} {raw!r} is where the device "
                    f"plugin mounts {hit} for the device's limiter; a volume there would "
                    "cover it"
                )
    return None


def protected_path_roots(manager: BackendManager) -> tuple[str, ...]:
    """Every installed vendor's ``DeviceTypeInfo.protected_paths``, normalised, once."""
    seen: dict[str, None] = {}
    for t in manager.device_types():
        for path in t.protected_paths:
            seen.setdefault(posixpath.normpath(path), None)
    return tuple(seen)


def allocate_env_patterns(manager: BackendManager) -> tuple[str, ...]:
    """Every installed vendor's ``DeviceTypeInfo.allocate_env`` patterns, in order, once.

    Any vendor's, not only those the container asks for: a node may run several vendors'
    container runtimes, and a name another vendor's Allocate sets is no tenant's to set."""
    seen: dict[str, None] = {}
    for t in manager.device_types():
        for pattern in t.allocate_env:
            seen.setdefault(pattern, None)
    return tuple(seen)


@attrs.frozen
class NoDevicesEnv:
    """A vendor's device-choosing variable and its value for none
    (``DeviceTypeInfo.visible_devices_env``).

    Attributes:
        vendor: the vendor key (``NVIDIA``).
        variable: the variable its container runtime reads (``NVIDIA_VISIBLE_DEVICES``).
        none: the value that hands no device (``none``); None when the runtime documents
            none (unset hands no device): then any value is denied and nothing is set.
        everywhere: the backend's ``overwriteEnv`` option is true: set also in pods the
            webhook does not otherwise mutate (HAMi's nvidia ``overwriteEnv``).
    """

    vendor: str
    variable: str
    none: str | None
    everywhere: bool


def no_devices_env(manager: BackendManager) -> tuple[NoDevicesEnv, ...]:
    """Every installed vendor's ``visible_devices_env``, with its backend's
    ``overwriteEnv`` option (False when the backend has none)."""
    out: list[NoDevicesEnv] = []
    for t in manager.device_types():
        options = manager.vendor_config(manager.backend_of(t.vendor)).options
        for variable, none in t.visible_devices_env:
            out.append(NoDevicesEnv(t.vendor, variable, none, options.get("overwriteEnv") is True))
    return tuple(out)


def visible_env_denial(container: Mapping[str, Any], entries: Iterable[NoDevicesEnv]) -> str | None:
    """Why this container (one that asks for none of ``entries``' vendors' devices) is
    denied its own ``env``, or None: an entry (any of them: the last of a name wins in
    kubelet) naming one of the variables with another value than none, or from
    ``valueFrom``, would have the vendor's runtime hand it devices nobody scheduled.

    Names are matched exactly (env names are case-sensitive: ``nvidia_visible_devices``
    is another variable, which no runtime reads). ``envFrom`` needs no check: an ``env``
    entry wins over every ``envFrom`` source (Kubernetes ``EnvFromSource``), and the
    webhook adds the none value to ``env``."""
    wanted = {e.variable: e for e in entries}
    env = container.get("env")
    for e in env if isinstance(env, list) else []:
        name = e.get("name") if isinstance(e, Mapping) else None
        if not isinstance(name, str) or name not in wanted:
            continue
        entry = wanted[name]
        if "valueFrom" in e or entry.none is None or e.get("value") != entry.none:
            value = "valueFrom" if "valueFrom" in e else repr(e.get("value"))
            rule = "may not set it" if entry.none is None else f"gets {entry.variable}={entry.none}"
            return (
                f"container {container.get('name')!r}: env {entry.variable}={value} would "
                f"have the container runtime hand it {entry.vendor} devices the scheduler "
                f"did not assign; a container that asks for no {entry.vendor} device {rule}"
            )
    return None


__all__ = [
    "NoDevicesEnv",
    "DISABLE_CONTROL_LABEL",
    "SHIM_ENV",
    "SHIM_ENV_PREFIXES",
    "allocate_env_patterns",
    "changed_owned_annotations",
    "env_denial",
    "is_shim_variable",
    "mount_denial",
    "no_devices_env",
    "owned_annotation_keys",
    "prefix_may_form_shim_variable",
    "protected_path_roots",
    "visible_env_denial",
]
