"""Per-pod device scoring weights (HAMi 2.10's ``hami.io/device-scoring-weights``).

HAMi 2.10 scores each candidate device of a pod as ``10 x (slot x predicted sharer
fraction + core x predicted compute fraction + memory x predicted memory fraction)``
(the pod's own request included) and lets a pod weigh the three parts with the
annotation ``slot=1,core=1,memory=3``. Source: HAMi 2.10 ``pkg/util/device_scoring_weights.go``
(syntax, defaults, errors), ``pkg/scheduler/policy/gpu_policy.go`` ``ComputeScore`` (the
score), ``docs/develop/scheduler-policy.md`` "Per-pod device scoring weights".
"""

from __future__ import annotations

import re

import attrs

#: The pod annotation (HAMi ``DeviceScoringWeightsAnnotationKey``, ``pkg/util/types.go``).
DEVICE_SCORING_WEIGHTS_ANNOTATION = "hami.io/device-scoring-weights"

#: HAMi reads each weight with Go's ``strconv.ParseInt(s, 10, 64)``: an optional sign and
#: decimal digits, nothing else (no ``_``, no other digits), at most int64.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
_KEYS = ("slot", "core", "memory")


@attrs.frozen
class DeviceScoringWeights:
    """The weights of a device's score: sharer slots, compute, memory (non-negative
    integers, at least one positive). The defaults (1, 1, 1) are HAMi's equal weights."""

    slot: int = 1
    core: int = 1
    memory: int = 1

    @classmethod
    def parse(cls, value: str) -> DeviceScoringWeights:
        """Read an annotation value: exactly the three ``key=value`` entries ``slot``,
        ``core`` and ``memory``, in any order, blanks around keys and values ignored
        (``" memory = 3, slot = 1, core = 0 "``).

        Raises:
            ValueError: with HAMi's reason (``expected slot, core, and memory weights``,
                ``expected key=value entries``, ``duplicate "slot" weight``, ``"core"
                weight must be an integer``, ``"core" weight must not be negative``,
                ``unknown weight "bandwidth"``, ``at least one weight must be positive``).
        """
        parts = value.split(",")
        if len(parts) != len(_KEYS):
            raise ValueError("expected slot, core, and memory weights")
        weights: dict[str, int] = {}
        for part in parts:
            key, eq, raw = part.strip().partition("=")
            if not eq:
                raise ValueError("expected key=value entries")
            key, raw = key.strip(), raw.strip()
            if key in weights:
                raise ValueError(f'duplicate "{key}" weight')
            # the length check first: int() of a huge digit string is slow, then refused
            if (
                len(raw) > 64
                or not _INTEGER.fullmatch(raw)
                or not _INT64_MIN <= int(raw) <= _INT64_MAX
            ):
                raise ValueError(f'"{key}" weight must be an integer')
            weight = int(raw)
            if weight < 0:
                raise ValueError(f'"{key}" weight must not be negative')
            if key not in _KEYS:
                raise ValueError(f'unknown weight "{key}"')
            weights[key] = weight
        if not any(weights.values()):
            raise ValueError("at least one weight must be positive")
        return cls(**weights)

    def __str__(self) -> str:
        return f"slot={self.slot},core={self.core},memory={self.memory}"
