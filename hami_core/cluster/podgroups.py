"""A gang group's PodGroup object, read from the API server when its CRD is installed.

scheduler-plugins' coscheduling (``scheduling.x-k8s.io/v1alpha1``) and Volcano
(``scheduling.volcano.sh/v1beta1``) each define a namespaced ``PodGroup`` whose
``spec.minMember`` is the group's minimum; scheduler-plugins' also has
``spec.scheduleTimeoutSeconds``. ``PodGroupReader`` looks a group up by namespace and
name in both, uncached by a watch (one GET per group, answers kept ``ttl_s``): a CRD
that is absent (404), or a scheduler not allowed to read it (403), answers None, and the
pods' ``hami.io/gang-min-member`` annotation speaks alone (docs/preemption-and-gangs.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import attrs

log = logging.getLogger(__name__)

#: ``(group, version, plural)`` of the PodGroup CRDs read, in this order.
POD_GROUP_APIS = (
    ("scheduling.x-k8s.io", "v1alpha1", "podgroups"),
    ("scheduling.volcano.sh", "v1beta1", "podgroups"),
)


@attrs.frozen
class PodGroupSpec:
    """What hami reads of a PodGroup: ``minMember`` and ``scheduleTimeoutSeconds``
    (None when absent or not a positive integer)."""

    min_member: int | None = None
    timeout_s: float | None = None


class CustomObjects(Protocol):
    """The one call of ``kubernetes.client.CustomObjectsApi`` this needs."""

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Any: ...


def read_spec(obj: Any) -> PodGroupSpec:
    """A PodGroup object's ``PodGroupSpec``; a field of the wrong type is left out."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    spec = spec if isinstance(spec, dict) else {}

    def positive(value: Any) -> int | None:
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        )

    timeout = positive(spec.get("scheduleTimeoutSeconds"))
    return PodGroupSpec(
        min_member=positive(spec.get("minMember")),
        timeout_s=float(timeout) if timeout is not None else None,
    )


class PodGroupReader:
    """``(namespace, name) -> PodGroupSpec | None`` over the API server (module
    docstring). Thread-safe; never raises."""

    def __init__(
        self,
        api: CustomObjects,
        *,
        ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, PodGroupSpec | None]] = {}

    @classmethod
    def over(cls, api_client: Any) -> PodGroupReader:
        """A reader through a ``kubernetes.client.ApiClient`` (``hami scheduler``'s)."""
        from kubernetes import client as k8s

        return cls(k8s.CustomObjectsApi(api_client))

    def __call__(self, namespace: str, name: str) -> PodGroupSpec | None:
        now = self.clock()
        with self._lock:
            hit = self._seen.get((namespace, name))
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        found = self._read(namespace, name)
        with self._lock:
            if len(self._seen) > 4096:
                self._seen.clear()
            self._seen[(namespace, name)] = (now, found)
        return found

    def _read(self, namespace: str, name: str) -> PodGroupSpec | None:
        for group, version, plural in POD_GROUP_APIS:
            try:
                obj = self.api.get_namespaced_custom_object(group, version, namespace, plural, name)
            except Exception as exc:  # absent CRD or object (404), not allowed (403), down
                if getattr(exc, "status", None) not in (403, 404):
                    log.warning("cannot read PodGroup %s/%s (%s): %s", namespace, name, group, exc)
                continue
            return read_spec(obj)
        return None


__all__ = ["POD_GROUP_APIS", "CustomObjects", "PodGroupReader", "PodGroupSpec", "read_spec"]
