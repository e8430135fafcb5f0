"""What the mutating webhook decides for a pod (PROTOCOL.md §6).

A pod is mutated when its ``schedulerName`` is empty, ours, or ``default-scheduler`` (unless
``forceOverwriteDefaultScheduler`` is false: ``takes_scheduler_name``), and any container (init containers included) asks for a managed resource. Each backend
defaults and validates its containers (``hami_mutate``); the core adds the checks every
vendor shares: privileged containers, a preset ``spec.nodeName``, scheduler-owned
annotations, policy annotations, quantities and namespace quotas.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.cluster.base import ClusterStore
from hami_core.errors import InvalidInputError
from hami_core.facts.nodes import read_node
from hami_core.facts.policy import resolve_policies
from hami_core.facts.quota import (
    CORES,
    MEMORY,
    QuotaView,
    namespace_usage,
    pod_charge,
    quota_device_types,
    quota_limits,
)
from hami_core.facts.usage import requested_vendors
from hami_core.model import (
    Charge,
    ContainerRequest,
    DeviceInfo,
    DeviceRequest,
    MutateResult,
    PodRequest,
)
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.config import HamiConfig
from hami_core.protocol.pods import check_pod_shape, containers, pod_ref

from .misplaced import misplaced_limits
from .mutation import apply_mutation
from .trust import (
    DISABLE_CONTROL_ALLOW,
    DISABLE_CONTROL_LABEL,
    allocate_env_patterns,
    changed_owned_annotations,
    env_denial,
    mount_denial,
    no_devices_env,
    owned_annotation_keys,
    protected_path_roots,
    visible_env_denial,
)

#: kube's own scheduler (``k8s.io/api/core/v1`` ``DefaultSchedulerName``); kube-apiserver
#: sets it on a pod that names none (``pkg/apis/core/v1/defaults.go``
#: ``SetDefaults_PodSpec``), before any admission webhook sees the pod.
DEFAULT_SCHEDULER = "default-scheduler"


def takes_scheduler_name(scheduler_name: object, config: HamiConfig) -> bool:
    """Whether the webhook takes a pod with this ``spec.schedulerName`` (None or "" for
    none): none, ours (``config.scheduler_name``), or ``default-scheduler`` while
    ``config.force_overwrite_default_scheduler`` (HAMi ``pkg/scheduler/webhook.go``
    ``Handle``: any other name, or ``default-scheduler`` with
    ``--force-overwrite-default-scheduler=false``, is "pod already has different
    scheduler assigned"). ``hami simulate`` asks the same."""
    if scheduler_name in (None, "", config.scheduler_name):
        return True
    return scheduler_name == DEFAULT_SCHEDULER and config.force_overwrite_default_scheduler


@attrs.frozen(kw_only=True)
class AdmissionResult:
    """The webhook's answer.

    Attributes:
        allowed: False when denied.
        patch: RFC 6902 operations (empty when nothing changes or denied).
        message: why it was denied (names the cause), or "".
        reason: a short code for the denial (``PrivilegedContainer``, ``NodeNamePreset``,
            ``SchedulerOwnedAnnotation``, ``ProtectedEnv``, ``ProtectedPath``,
            ``InvalidRequest``,
            ``MisplacedLimits``,
            ``ResourceQuotaNotFit``).
        mutated: True when the pod asks for managed devices and was handled.
    """

    allowed: bool = True
    patch: tuple[dict[str, Any], ...] = ()
    message: str = ""
    reason: str = ""
    mutated: bool = False


def _deny(reason: str, message: str) -> AdmissionResult:
    return AdmissionResult(allowed=False, reason=reason, message=message, mutated=True)


class Admission:
    """Decides and patches pods at admission."""

    def __init__(
        self,
        manager: BackendManager,
        store: ClusterStore | None = None,
        *,
        trusted_users: frozenset[str] = frozenset(),
    ) -> None:
        """Args:
        store: where namespace quotas and usage are read; None skips quota checks.
        trusted_users: ``userInfo.username`` values that may write scheduler-owned
            annotations (the scheduler's and device plugin's service accounts, e.g.
            ``system:serviceaccount:kube-system:hami-scheduler``).
        """
        self.manager = manager
        self.store = store
        self.trusted_users = trusted_users
        self._owned = owned_annotation_keys(manager)
        self._allocate_env = allocate_env_patterns(manager)
        self._no_devices = no_devices_env(manager)
        self._protected_paths = protected_path_roots(manager)

    def container_asks(
        self, pod: Mapping[str, Any], container: Mapping[str, Any], *, init: bool
    ) -> bool:
        """True when a backend finds a device request in the container (a malformed
        quantity of a managed resource counts as asking)."""
        try:
            return bool(self.manager.parse_requests(pod, container, init=init))
        except InvalidInputError:
            return True

    def _no_devices_ops(
        self,
        working: dict[str, Any],
        parsed: list[tuple[Any, bool, str, list[DeviceRequest]]],
        *,
        mutating: bool,
    ) -> AdmissionResult | list[dict[str, Any]]:
        """The operations that give every container of ``parsed`` asking for none of a
        vendor's devices that vendor's none value (``DeviceTypeInfo.visible_devices_env``),
        or the denial of a container stating another value. ``mutating``: a pod the
        webhook takes (every vendor's variable); else only those of backends whose
        ``overwriteEnv`` is true (HAMi's nvidia key: every pod the webhook sees)."""
        entries = [e for e in self._no_devices if mutating or e.everywhere]
        ops: list[dict[str, Any]] = []
        for container, _, path, reqs in parsed:
            # a variable any vendor it asks for declares is that device plugin's (several
            # Ascend models share ASCEND_VISIBLE_DEVICES)
            asked = {r.vendor for r in reqs}
            own = {e.variable for e in self._no_devices if e.vendor in asked}
            blank = [e for e in entries if e.variable not in own]
            if not blank:
                continue
            reason = visible_env_denial(container, blank)
            if reason:
                return _deny("ProtectedEnv", f"pod {pod_ref(working)}: {reason}")
            env = {e.variable: e.none for e in blank if e.none is not None}
            if env:
                ops += apply_mutation(working, container, path, MutateResult(env=env))
        return ops

    def _unmutated(
        self,
        working: dict[str, Any],
        parsed: list[tuple[Any, bool, str, list[DeviceRequest]]],
    ) -> AdmissionResult:
        """The answer for a pod the webhook does not take: allowed, with the
        ``overwriteEnv`` operations when a backend has it on (whatever the pod's
        ``schedulerName`` and labels say: both are its author's)."""
        ops = self._no_devices_ops(working, parsed, mutating=False)
        return ops if isinstance(ops, AdmissionResult) else AdmissionResult(patch=tuple(ops))

    def _owned_denial(
        self, old: Mapping[str, Any] | None, new: Mapping[str, Any], user: str | None
    ) -> AdmissionResult | None:
        if user is not None and user in self.trusted_users:
            return None
        changed = changed_owned_annotations(old, new, self._owned)
        if not changed:
            return None
        verb = "set" if old is None else "changed"
        return _deny(
            "SchedulerOwnedAnnotation",
            f"pod {pod_ref(new)}: annotations {', '.join(changed)} are written by the scheduler "
            f"only ({verb} by {user or 'an unknown user'})",
        )

    def review_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], *, user: str | None = None
    ) -> AdmissionResult:
        """Decide for the UPDATE of a pod (or of its ``status`` or ``ephemeralcontainers``):
        denied when it adds, changes or removes a scheduler-owned annotation and ``user``
        is not trusted; ephemeral containers it adds get the none values of
        ``visible_devices_env`` as app containers do (``_ephemeral``)."""
        for obj in (old, new):
            try:
                check_pod_shape(obj)
            except InvalidInputError as exc:
                return _deny("InvalidRequest", f"pod {pod_ref(new)}: {exc}")
        return (
            self._owned_denial(old, new, user)
            or self._placed_policy_denial(old, new, user)
            or self._ephemeral(old, new)
        )

    def _placed_policy_denial(
        self, old: Mapping[str, Any], new: Mapping[str, Any], user: str | None
    ) -> AdmissionResult | None:
        """A placed pod (bound, or its bind in flight: ``hami.io/vgpu-node``) keeps the
        ``hami.io/gpu-scheduler-policy`` it was placed under: whether its devices take
        other pods follows from it (``mutex``, HAMi#3038), so a tenant sharing a GPU
        cannot write ``mutex`` afterwards to keep every later pod off it."""
        if user is not None and user in self.trusted_users:
            return None
        key = keys.GPU_SCHEDULER_POLICY
        old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
        old_ann, new_ann = old_meta.get("annotations") or {}, new_meta.get("annotations") or {}
        placed = (old.get("spec") or {}).get("nodeName") or old_ann.get(keys.VGPU_NODE)
        if not placed or old_ann.get(key) == new_ann.get(key):
            return None
        return _deny(
            "PlacedPolicyChange",
            f"pod {pod_ref(new)}: annotation {key} cannot change once the pod is placed "
            "(the devices it holds take other pods or not by it)",
        )

    def _ephemeral(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> AdmissionResult:
        """The ephemeral containers this UPDATE adds (``kubectl debug``, through the
        ``pods/ephemeralcontainers`` subresource) ask for no device (Kubernetes allows
        them no resources), so each gets every vendor's none value in a pod the webhook
        mutated (``schedulerName`` ours and a container asking for a managed device),
        and ``overwriteEnv``'s in any pod; one stating another value is denied. The
        subresource's object is the Pod from Kubernetes 1.22 and an
        ``EphemeralContainers`` object (the list at the top, no spec) on 1.16-1.21, where
        the pod's own containers are unknown and only ``overwriteEnv`` applies."""
        legacy = new.get("kind") == "EphemeralContainers"
        holder_new = new if legacy else new.get("spec") or {}
        holder_old = old if legacy else old.get("spec") or {}
        items = holder_new.get("ephemeralContainers") if isinstance(holder_new, Mapping) else None
        if not isinstance(items, list) or not items:
            return AdmissionResult()
        earlier = holder_old.get("ephemeralContainers") if isinstance(holder_old, Mapping) else None
        before = {c.get("name") for c in earlier or [] if isinstance(c, Mapping)}
        working: dict[str, Any] = copy.deepcopy(dict(new))
        listing = (working if legacy else working["spec"])["ephemeralContainers"]
        where = "/ephemeralContainers" if legacy else "/spec/ephemeralContainers"
        added: list[tuple[Any, bool, str, list[DeviceRequest]]] = [
            (c, False, f"{where}/{i}", [])
            for i, c in enumerate(listing)
            if isinstance(c, dict) and c.get("name") not in before
        ]
        if not added:
            return AdmissionResult()
        for c, _, path, _ in added:
            try:  # the fields a container's check reads (env, envFrom, ...)
                check_pod_shape({"metadata": {}, "spec": {"containers": [c]}})
            except InvalidInputError as exc:
                detail = str(exc).replace("pod spec.containers[0]", path.lstrip("/"))
                return _deny("InvalidRequest", f"pod {pod_ref(new)}: {detail}")
        mutated = (
            not legacy
            and (new.get("spec") or {}).get("schedulerName") == self.manager.config.scheduler_name
            and any(self.container_asks(new, c, init=init) for c, init, _ in containers(new))
        )
        ops = self._no_devices_ops(working, added, mutating=mutated)
        return ops if isinstance(ops, AdmissionResult) else AdmissionResult(patch=tuple(ops))

    def review(
        self,
        pod: Mapping[str, Any],
        *,
        namespace_labels: Mapping[str, str] | None = None,
        user: str | None = None,
    ) -> AdmissionResult:
        """Decide for one pod (a CREATE). Never raises for bad pods: they are denied.

        Args:
            namespace_labels: the labels of the pod's namespace.
            user: ``userInfo.username`` of the request (None: not known, not trusted).
        """
        try:
            check_pod_shape(pod)
        except InvalidInputError as exc:
            return _deny("InvalidRequest", f"pod {pod_ref(pod)}: {exc}")
        if "spec" in pod and not (pod.get("spec") or {}).get("containers"):
            # as HAMi's webhook (and the API server after us) refuses it
            return _deny("InvalidRequest", f"pod {pod_ref(pod)}: spec.containers is empty")
        # Trust first: no label, schedulerName or namespace exempts a pod from these.
        owned = self._owned_denial(None, pod, user)
        if owned is not None:
            return owned
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ns_labels = namespace_labels or {}
        if ns_labels.get(keys.WEBHOOK_IGNORE_LABEL) == keys.WEBHOOK_IGNORE_VALUE:
            return AdmissionResult()
        allow_off = ns_labels.get(DISABLE_CONTROL_LABEL) == DISABLE_CONTROL_ALLOW
        # One parse per container, kept for mutation and the request checks.
        working: dict[str, Any] = copy.deepcopy(dict(pod))
        parsed: list[tuple[Any, bool, str, list[DeviceRequest]]] = []
        malformed: InvalidInputError | None = None
        for container, init, path in containers(working):
            try:
                reqs = self.manager.parse_requests(working, container, init=init)
            except InvalidInputError as exc:
                malformed = malformed or exc
                reqs = []
                asking = True
            else:
                asking = bool(reqs)
            if not asking:
                parsed.append((container, init, path, reqs))
                continue
            reason = env_denial(
                container, allow_disable_control=allow_off, allocate_env=self._allocate_env
            )
            if reason:
                return _deny("ProtectedEnv", f"pod {pod_ref(pod)}: {reason}")
            reason = mount_denial(container, self._protected_paths)
            if reason:
                return _deny("ProtectedPath", f"pod {pod_ref(pod)}: {reason}")
            parsed.append((container, init, path, reqs))
        asks = malformed is not None or any(reqs for *_, reqs in parsed)
        # The object label exempts only a pod that asks for no managed device.
        labels = meta.get("labels") or {}
        if not asks and labels.get(keys.WEBHOOK_IGNORE_LABEL) == keys.WEBHOOK_IGNORE_VALUE:
            return self._unmutated(working, parsed)
        ours = self.manager.config.scheduler_name
        if not takes_scheduler_name(spec.get("schedulerName"), self.manager.config):
            return self._unmutated(working, parsed)
        misplaced = misplaced_limits(pod, self.manager.device_types())
        if misplaced:
            return _deny("MisplacedLimits", f"pod {pod_ref(pod)}: {misplaced}")
        if malformed is not None:
            return _deny("InvalidRequest", f"pod {pod_ref(pod)}: {malformed}")
        if not asks:
            return self._unmutated(working, parsed)
        patch: list[dict[str, Any]] = []
        for container, _, path, reqs in parsed:
            if not reqs:
                continue
            for backend, result in self.manager.mutate(
                working, container, container_path=path, requests=reqs
            ):
                if result.denial:
                    return _deny("InvalidRequest", f"pod {pod_ref(pod)}: {result.denial}")
                try:
                    patch += apply_mutation(working, container, path, result)
                except InvalidInputError as exc:
                    return _deny("InvalidRequest", f"backend {backend!r} produced {exc}")
        blank = self._no_devices_ops(working, parsed, mutating=True)
        if isinstance(blank, AdmissionResult):
            return blank
        patch += blank

        request = PodRequest(
            namespace=str(meta.get("namespace", "default")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            containers=tuple(
                ContainerRequest(name=str(c.get("name", "")), init=init, devices=tuple(reqs))
                for c, init, _, reqs in parsed
            ),
        )
        denial = self._shared_checks(pod, request)
        if denial is not None:
            return denial
        if spec.get("schedulerName") != ours:
            patch.append({"op": "add", "path": "/spec/schedulerName", "value": ours})
        return AdmissionResult(patch=tuple(patch), mutated=True)

    def _cores(self, request: DeviceRequest) -> int:
        """Per device, what ``request`` charges against its vendor's cores quota
        (``DeviceTypeInfo.quota_request_cores``; ``cores_pct`` when the vendor has none)."""
        convert = self.manager.device_type(request.vendor).quota_request_cores
        return request.cores_pct if convert is None else max(0, convert(request))

    def _request_charge(
        self, request: DeviceRequest, devices: _ClusterDevices, *, sized: bool
    ) -> Charge:
        """What ``request`` charges against its namespace's quotas at admission: count x
        per-device memory and cores; per device as the vendor's ``quota_request_charge``
        says from the cluster's devices (a MIG profile's memory and cores), else as
        carried (memory in percent is checked per candidate device at fit). ``sized``:
        the namespace limits the vendor's memory or cores (else the charge per device
        matters to no quota and the inventories are not read)."""
        memory, cores = request.memory_mib, self._cores(request)
        convert = self.manager.device_type(request.vendor).quota_request_charge
        if convert is not None and sized:
            charged = convert(request, lambda: devices.of(request.vendor))
            if charged is not None:
                memory, cores = max(0, charged[0]), max(0, charged[1])
        return Charge(request.count * memory, request.count * cores, request.count)

    def _shared_checks(self, pod: Mapping[str, Any], request: PodRequest) -> AdmissionResult | None:
        ref = pod_ref(pod)
        spec = pod.get("spec") or {}
        for container, _, _ in containers(pod):
            if ((container.get("securityContext") or {}).get("privileged")) is True:
                return _deny(
                    "PrivilegedContainer",
                    f"pod {ref}: container {container.get('name')!r} is privileged; a privileged "
                    "container sees every device and escapes the limits, so it cannot share one",
                )
        if spec.get("nodeName"):
            return _deny(
                "NodeNamePreset",
                f"pod {ref}: spec.nodeName is preset to {spec['nodeName']!r}; a pod asking for shared "
                "devices must be placed by the scheduler",
            )
        try:
            resolve_policies(pod, self.manager.config)
        except InvalidInputError as exc:
            return _deny("InvalidRequest", str(exc))
        if self.store is None:
            return None
        types = quota_device_types(self.manager)  # the names the config gives (§8)
        limits = quota_limits(self.store.list_quotas(request.namespace), types)
        if not limits:
            return None
        # a pod being admitted has not started: its init containers count (PROTOCOL.md §1);
        # memory in percent depends on the device: fit checks it per candidate
        devices = _ClusterDevices(self.store, self.manager)
        # the cluster's inventories are read only for a vendor whose memory or cores
        # the namespace limits
        sized = {lim.vendor for lim in limits if lim.measure in (MEMORY, CORES)}
        charge = pod_charge(
            (
                c.init,
                {
                    r.vendor: self._request_charge(r, devices, sized=r.vendor in sized)
                    for r in c.devices
                },
            )
            for c in request.containers
        )
        used = namespace_usage(
            self.store.list_pods(namespace=request.namespace),
            types,
            scheduler_name=self.manager.config.scheduler_name,
            requested=lambda p: requested_vendors(p, self.manager),
        )
        message = QuotaView(tuple(limits), used).violation(charge)
        if message:
            return _deny("ResourceQuotaNotFit", f"pod {ref}: exceeds {message}")
        return None


class _ClusterDevices:
    """The cluster's devices per vendor, read from the store's nodes once per admission
    and only when a vendor's ``quota_request_charge`` asks (bad inventories count
    nothing: ``read_node`` marks them, as the scheduler does)."""

    def __init__(self, store: ClusterStore, manager: BackendManager) -> None:
        self.store = store
        self.manager = manager
        self._read: dict[str, tuple[DeviceInfo, ...]] = {}

    def of(self, vendor: str) -> tuple[DeviceInfo, ...]:
        if vendor not in self._read:
            dtype = self.manager.device_type(vendor)
            now = dt.datetime.now(dt.UTC)
            self._read[vendor] = tuple(
                d
                for node in self.store.list_nodes()
                for d in read_node(
                    node, (dtype,), now=now, reader=self.manager.node_devices
                ).devices_of(vendor)
            )
        return self._read[vendor]
