"""The name of a pod's gang group, as the schedulers of gangs write it: the
``scheduling.x-k8s.io/pod-group`` label (scheduler-plugins' coscheduling), else the
``scheduling.k8s.io/group-name`` annotation (Volcano). The rules of a group (its
minimum, its reservation) are ``hami_core.scheduling.gangs``'."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.errors import InvalidInputError
from hami_core.protocol import annotations as keys
from hami_core.protocol.pods import pod_ref


def group_name(pod: Mapping[str, Any]) -> str | None:
    """The pod's group name (without its namespace), or None when it is in none or the
    pod's metadata is malformed (the cycle's shape check names that fault).

    Raises:
        InvalidInputError: a group name that is not a string.
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {} if isinstance(meta, Mapping) else {}
    ann = meta.get("annotations") or {} if isinstance(meta, Mapping) else {}
    if not isinstance(labels, Mapping) or not isinstance(ann, Mapping):
        return None
    name = labels.get(keys.POD_GROUP_LABEL) or ann.get(keys.VOLCANO_GROUP_NAME)
    if not name:
        return None
    if not isinstance(name, str):
        raise InvalidInputError(f"pod {pod_ref(pod)}: the group name must be a string")
    return name
