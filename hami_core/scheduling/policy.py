"""Which node and device policy applies to a pod: its annotations, else the config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.errors import InvalidInputError
from hami_core.model import DevicePolicy, NodePolicy
from hami_core.protocol.annotations import GPU_SCHEDULER_POLICY, NODE_SCHEDULER_POLICY
from hami_core.protocol.config import HamiConfig


@attrs.frozen
class Policies:
    node: NodePolicy
    device: DevicePolicy


def resolve_policies(
    pod: Mapping[str, Any],
    config: HamiConfig,
    *,
    node: NodePolicy | None = None,
    device: DevicePolicy | None = None,
) -> Policies:
    """The pod's policies: ``hami.io/node-scheduler-policy`` and
    ``hami.io/gpu-scheduler-policy`` annotations win over ``node`` / ``device``
    overrides, which win over the configured defaults.

    Raises:
        InvalidInputError: an annotation names an unknown policy (never a silent default).
    """
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return Policies(
        node=_pick(ann, NODE_SCHEDULER_POLICY, NodePolicy, node or config.node_policy),
        device=_pick(ann, GPU_SCHEDULER_POLICY, DevicePolicy, device or config.device_policy),
    )


def _pick(ann: Mapping[str, str], key: str, kind: Any, default: Any) -> Any:
    if key not in ann:
        return default
    try:
        return kind(ann[key].strip())
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidInputError(f"annotation {key}: {ann[key]!r} is not one of {allowed}") from None
