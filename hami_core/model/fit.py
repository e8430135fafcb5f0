"""Results of fitting one container's request onto one node."""

from __future__ import annotations

import collections
from collections.abc import Mapping

import attrs

from .allocation import ContainerDevices
from .reason import ReasonCode


@attrs.frozen(kw_only=True)
class FitResult:
    """The answer of ``hami_fit``: a placement, or a no-fit with reasons.

    Attributes:
        devices: the chosen slices (exactly ``request.count`` of them) when it fits;
            empty when it does not.
        device_reasons: uuid -> why that device was not usable (every device of the
            vendor on the node that was rejected; chosen devices have no entry).
        node_reason: a reason that concerns the node as a whole (e.g.
            ``NodeInsufficientDevice``), or None.
        largest_memory_mib: on a no-fit, the most memory per device (MiB) a request
            of the same shape could get on this node, for explanations; None if unknown.
        largest_cores_pct: likewise for compute, percent.
    """

    devices: ContainerDevices = ()
    device_reasons: Mapping[str, ReasonCode] = attrs.field(factory=dict)
    node_reason: ReasonCode | None = None
    largest_memory_mib: int | None = None
    largest_cores_pct: int | None = None

    @property
    def fits(self) -> bool:
        """True when the request was placed."""
        return bool(self.devices) and self.node_reason is None

    def reason_counts(self) -> dict[ReasonCode, int]:
        """Number of devices per reason code, most frequent first, then by code."""
        counts = collections.Counter(self.device_reasons.values())
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].value)))

    def summary(self, total_devices: int) -> str:
        """Reasons as on the wire: ``"2/4 CardInsufficientMemory, 2/4 CardTypeMismatch"``.

        A node-level reason comes first, without a count.
        """
        parts = [f"{n}/{total_devices} {code.value}" for code, n in self.reason_counts().items()]
        if self.node_reason is not None:
            parts.insert(0, self.node_reason.value)
        return ", ".join(parts)
