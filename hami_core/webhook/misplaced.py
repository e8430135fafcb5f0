"""Device limits written where Kubernetes does not read them (issue: pod annotations).

A pod that writes ``nvidia.com/gpumem: 4000`` under ``metadata.annotations`` instead of
``resources.limits`` would otherwise get the whole card booked (the annotation is read by
nobody). Denied at admission, naming the annotation and where the value belongs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from hami_core.model import DeviceTypeInfo


def misplaced_limits(pod: Mapping[str, Any], device_types: Iterable[DeviceTypeInfo]) -> str | None:
    """A denial message when a pod annotation key is a managed resource name, else None.

    Args:
        pod: the Pod object.
        device_types: the installed backends' device types (their resource names and
            ``other_resources``, e.g. ``nvidia.com/priority``, ``nvidia.com/mig-<profile>``).

    Returns:
        e.g. ``annotation nvidia.com/gpumem is a resource: write it under
        spec.containers[].resources.limits (annotations are not read as limits)``.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, Mapping) or not annotations:
        return None
    names: set[str] = set()
    patterns: list[str] = []
    for t in device_types:
        r = t.resources
        names |= {n for n in (r.count, r.memory, r.memory_pct, r.cores, r.cores_alias) if n}
        patterns.extend(t.other_resources)  # nvidia.com/priority, nvidia.com/mig-<profile>
    wrong = sorted(
        k for k in map(str, annotations) if k in names or any(fnmatchcase(k, p) for p in patterns)
    )
    if not wrong:
        return None
    return (
        f"annotation {', '.join(wrong)} is a resource: write it under "
        "spec.containers[].resources.limits (annotations are not read as limits)"
    )
