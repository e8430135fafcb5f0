"""Goals other than pending pods: "N whole free GPUs (of model M)" (``hami defrag --goal``).

A whole free GPU is one that no pod holds a slice of (no sharer), not cordoned: what
a pod asking for one whole card (``nvidia.com/gpu: 1``, all its compute and memory)
can take. The planner reaches the goal by planning for N such *goal pods* as it plans
for pending pods (``Planner.plan_goal``): each takes a whole free GPU where there is
one, else gets the fewest moves that empty one; the goal pods hold the GPUs found while
the next is sought (so no moved pod lands on one), and are gone from the plan's end
state. Pods move for a goal only if their priority is not above the goal's
(``priority=``, default 0), under the same rules as for a pending pod
(``movable.MovePolicy``).

The goal is written ``whole-gpus=N[,model=M][,priority=P]``: ``M`` matches GPU models
as ``nvidia.com/use-gputype`` does (whole words: ``A100`` matches
``NVIDIA A100-SXM4-80GB``). The GPUs are NVIDIA's (``nvidia.com/gpu``, under the
configuration's resource names).
"""

from __future__ import annotations

from typing import Any

import attrs

from hami_core.errors import ConfigError
from hami_core.plugin import BackendManager

#: The namespace of goal pods: not a valid namespace name, so no real pod shares a key.
GOAL_NAMESPACE = "(goal)"
#: The vendor key whose GPUs a goal counts.
GOAL_VENDOR = "NVIDIA"
#: The most GPUs one goal asks for (bounds plan time).
MAX_GOAL_GPUS = 1024
_MODEL_FILTER = "nvidia.com/use-gputype"


@attrs.frozen(kw_only=True)
class WholeGpus:
    """The goal "``count`` whole free GPUs (of ``model``)", pods of priority up to
    ``priority`` movable for it."""

    count: int
    model: str | None = None
    priority: int = 0

    def text(self) -> str:
        """The goal as ``--goal`` takes it."""
        parts = [f"whole-gpus={self.count}"]
        if self.model:
            parts.append(f"model={self.model}")
        if self.priority:
            parts.append(f"priority={self.priority}")
        return ",".join(parts)


@attrs.frozen(kw_only=True)
class GoalResult:
    """What a goal plan reached.

    Attributes:
        goal: the goal asked.
        free_before: whole free GPUs (of the model) the goal found without moves.
        reached: whole free GPUs (of the model) after the plan, at most ``goal.count``
            counted: the ones the plan names in ``gpus``.
        gpus: (node, uuid) of each, in the order found.
    """

    goal: WholeGpus
    free_before: int
    reached: int
    gpus: tuple[tuple[str, str], ...]

    @property
    def met(self) -> bool:
        return self.reached >= self.goal.count


def parse_goal(text: str) -> WholeGpus:
    """``whole-gpus=N[,model=M][,priority=P]`` (module docstring) as a ``WholeGpus``.

    Raises:
        ConfigError: (an ``InvalidInputError``; exit 2, as any refused flag) an unknown
            goal or key, a key given twice, N not an integer in 1..``MAX_GOAL_GPUS``, an
            empty model, P not an integer (each named).
    """
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise ConfigError(f"--goal: {part.strip()!r} is not KEY=VALUE")
        if key not in ("whole-gpus", "model", "priority"):
            raise ConfigError(f"--goal: unknown key {key!r} (whole-gpus=N[,model=M][,priority=P])")
        if key in fields:
            raise ConfigError(f"--goal: {key} given twice")
        fields[key] = value.strip()
    if "whole-gpus" not in fields:
        raise ConfigError("--goal: whole-gpus=N is required")
    count = _integer(fields["whole-gpus"], "whole-gpus")
    if not 1 <= count <= MAX_GOAL_GPUS:
        raise ConfigError(f"--goal: whole-gpus must be 1..{MAX_GOAL_GPUS}, not {count}")
    model = fields.get("model")
    if model is not None and not model:
        raise ConfigError("--goal: model is empty")
    priority = _integer(fields.get("priority", "0"), "priority")
    return WholeGpus(count=count, model=model, priority=priority)


def _integer(value: str, key: str) -> int:
    try:
        return int(value, 10)
    except ValueError:
        raise ConfigError(f"--goal: {key} must be an integer, not {value!r}") from None


def goal_pods(goal: WholeGpus, manager: BackendManager) -> list[dict[str, Any]]:
    """The goal's pods: ``goal.count`` pending pods each asking for one whole GPU (one
    device, all its compute and memory, under the configuration's resource names), the
    model filter when the goal names one, the goal's priority."""
    names = manager.device_type(GOAL_VENDOR).resources
    limits = {names.count: "1"}
    if names.cores:
        limits[names.cores] = "100"
    if names.memory_pct:
        limits[names.memory_pct] = "100"
    annotations = {_MODEL_FILTER: goal.model} if goal.model else {}
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"whole-gpu-{i + 1}",
                "namespace": GOAL_NAMESPACE,
                "uid": f"goal-whole-gpu-{i + 1}",
                # one timestamp: the queue order is then by name, the order found
                "creationTimestamp": "1970-01-01T00:00:00Z",
                "annotations": annotations,
            },
            "spec": {
                "schedulerName": manager.config.scheduler_name,
                "priority": goal.priority,
                "containers": [
                    {"name": "goal", "resources": {"limits": dict(limits), "requests": limits}}
                ],
            },
            "status": {"phase": "Pending"},
        }
        for i in range(goal.count)
    ]
