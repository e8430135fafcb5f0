"""kube-apiserver's ``Priority`` admission plugin, as ``hami simulate`` runs it.

Kubernetes 1.20 ``plugin/pkg/admission/priority/admission.go``: a pod naming a
``priorityClassName`` gets that class's ``value`` as ``spec.priority`` (and its
``preemptionPolicy``); a pod naming none gets the ``globalDefault`` class's, else 0; a
pod naming a class that does not exist, or stating a ``spec.priority`` (or a
``preemptionPolicy``) other than the computed one, is refused. The two built-in classes
(``system-cluster-critical``, ``system-node-critical``) always exist. The priority
preemption reads is therefore an administrator's number (docs/preemption-and-gangs.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: kube-apiserver's built-in classes (``scheduling.SystemPriorityClasses``).
SYSTEM_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


class PriorityClasses:
    """The cluster's PriorityClass objects by name (built-in ones included)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self.values: dict[str, int] = dict(SYSTEM_CLASSES)
        self.policies: dict[str, str] = {}
        self.default: str | None = None
        for obj in objects:
            name = str((obj.get("metadata") or {}).get("name") or "")
            value = obj.get("value")
            if not name or isinstance(value, bool) or not isinstance(value, int):
                continue
            self.values[name] = value
            policy = obj.get("preemptionPolicy")
            if isinstance(policy, str):
                self.policies[name] = policy
            if obj.get("globalDefault") is True:
                self.default = name

    def admit(self, pod: dict[str, Any]) -> str:
        """Write ``spec.priority`` (and ``preemptionPolicy``) on ``pod`` in place, or
        return the API server's refusal (``pods "x" is forbidden: ...``); "" when
        admitted."""
        spec = pod.setdefault("spec", {})
        name = str((pod.get("metadata") or {}).get("name") or "")
        wanted = spec.get("priorityClassName")
        if wanted:
            if wanted not in self.values:
                return _forbidden(name, f"no PriorityClass with name {wanted} was found")
            cls: str | None = str(wanted)
        else:
            cls = self.default
            if cls is not None:
                spec["priorityClassName"] = cls
        priority = self.values[cls] if cls is not None else 0
        stated = spec.get("priority")
        if stated is not None and stated != priority:
            return _not_computed(name, "integer value of priority", stated, priority)
        spec["priority"] = priority
        policy = self.policies.get(cls or "")
        if policy is not None:
            given = spec.get("preemptionPolicy")
            if given is not None and given != policy:
                return _not_computed(name, "string value of PreemptionPolicy", given, policy)
            spec["preemptionPolicy"] = policy
        return ""


def _forbidden(name: str, detail: str) -> str:
    return f'pods "{name}" is forbidden: {detail}'


def _not_computed(name: str, what: str, stated: Any, computed: Any) -> str:
    """kube-apiserver's Priority admission refusal of a ``what`` the pod states that
    differs from the one its PriorityClass gives."""
    return _forbidden(
        name,
        f"the {what} ({stated}) must not be provided in pod spec; priority admission "
        f"controller computed {computed} from the given PriorityClass name",
    )


__all__ = ["SYSTEM_CLASSES", "PriorityClasses"]
