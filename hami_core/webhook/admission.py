"""What the mutating webhook decides for a pod (PROTOCOL.md §6).

A pod is mutated when its ``schedulerName`` is empty, ``default-scheduler`` or ours, and
any container (init containers included) asks for a managed resource. Each backend
defaults and validates its containers (``hami_mutate``); the core adds the checks every
vendor shares: privileged containers, a preset ``spec.nodeName``, scheduler-owned
annotations, policy annotations, quantities and namespace quotas.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import attrs
import jsonpatch
import jsonpointer

from hami_core.cluster.base import ClusterStore
from hami_core.errors import InvalidInputError
from hami_core.model import Charge, collapse
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.scheduling.podspec import check_pod_shape, containers, pod_ref, read_pod_request
from hami_core.scheduling.policy import resolve_policies
from hami_core.scheduling.quota import namespace_usage, quota_limits, quota_violation


@attrs.frozen(kw_only=True)
class AdmissionResult:
    """The webhook's answer.

    Attributes:
        allowed: False when denied.
        patch: RFC 6902 operations (empty when nothing changes or denied).
        message: why it was denied (names the cause), or "".
        reason: a short code for the denial (``PrivilegedContainer``, ``NodeNamePreset``,
            ``SchedulerOwnedAnnotation``, ``InvalidRequest``, ``ResourceQuotaNotFit``).
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

    def __init__(self, manager: BackendManager, store: ClusterStore | None = None) -> None:
        """Args:
        store: where namespace quotas and usage are read; None skips quota checks.
        """
        self.manager = manager
        self.store = store

    def review(
        self, pod: Mapping[str, Any], *, namespace_labels: Mapping[str, str] | None = None
    ) -> AdmissionResult:
        """Decide for one pod (a CREATE). Never raises for bad pods: they are denied."""
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        ignore = (keys.WEBHOOK_IGNORE_LABEL, keys.WEBHOOK_IGNORE_VALUE)
        if (
            keys.WEBHOOK_IGNORE_LABEL,
            (meta.get("labels") or {}).get(keys.WEBHOOK_IGNORE_LABEL),
        ) == ignore:
            return AdmissionResult()
        if (namespace_labels or {}).get(keys.WEBHOOK_IGNORE_LABEL) == keys.WEBHOOK_IGNORE_VALUE:
            return AdmissionResult()
        ours = self.manager.config.scheduler_name
        if spec.get("schedulerName") not in (None, "", "default-scheduler", ours):
            return AdmissionResult()

        try:
            check_pod_shape(pod)
        except InvalidInputError as exc:
            return _deny("InvalidRequest", f"pod {pod_ref(pod)}: {exc}")
        working: dict[str, Any] = copy.deepcopy(dict(pod))
        asked = False
        for _, _, path in list(containers(pod)):
            container = jsonpointer.resolve_pointer(working, path)
            for backend, result in self.manager.mutate(working, container, container_path=path):
                asked = True
                if result.denial:
                    return _deny("InvalidRequest", f"pod {pod_ref(pod)}: {result.denial}")
                try:
                    working = jsonpatch.apply_patch(working, list(result.patch))
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    return _deny(
                        "InvalidRequest",
                        f"backend {backend!r} produced a patch that does not apply: {exc}",
                    )
                container = jsonpointer.resolve_pointer(working, path)
        if not asked:
            return AdmissionResult()

        denial = self._shared_checks(pod, working)
        if denial is not None:
            return denial
        working.setdefault("spec", {})["schedulerName"] = ours
        patch = jsonpatch.make_patch(dict(pod), working)
        return AdmissionResult(patch=tuple(patch.patch), mutated=True)

    def _shared_checks(
        self, pod: Mapping[str, Any], working: Mapping[str, Any]
    ) -> AdmissionResult | None:
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
        owned = set(keys.SCHEDULER_OWNED)
        for t in self.manager.device_types():
            owned |= {t.to_allocate_annotation, t.allocated_annotation}
        present = sorted(owned & set((pod.get("metadata") or {}).get("annotations") or {}))
        if present:
            return _deny(
                "SchedulerOwnedAnnotation",
                f"pod {ref}: annotations {', '.join(present)} are written by the scheduler only",
            )
        try:
            resolve_policies(pod, self.manager.config)
            request = read_pod_request(working, self.manager)
        except InvalidInputError as exc:
            return _deny("InvalidRequest", str(exc))
        if self.store is None:
            return None
        types = self.manager.device_types()
        limits = quota_limits(self.store.list_quotas(request.namespace), types)
        if not limits:
            return None
        # a pod being admitted has not started: its init containers count (PROTOCOL.md §1);
        # memory in percent depends on the device: fit checks it per candidate
        per_vendor = collapse(
            (
                c.init,
                {
                    r.vendor: Charge(r.count * r.memory_mib, r.count * r.cores_pct, r.count)
                    for r in c.devices
                },
            )
            for c in request.containers
        )
        charge: dict[tuple[str, str], int] = {}
        for vendor, c in per_vendor.items():
            charge[(vendor, "memory")] = c.memory_mib
            charge[(vendor, "cores")] = c.cores_pct
            charge[(vendor, "count")] = c.count
        used = namespace_usage(self.store.list_pods(namespace=request.namespace), types)
        message = quota_violation(limits, used, charge)
        if message:
            return _deny("ResourceQuotaNotFit", f"pod {ref}: exceeds {message}")
        return None
