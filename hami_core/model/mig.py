"""MIG capacity of a GPU and the MIG instances held on it (HAMi 2.10 ``pkg/device``:
``MigProfile``, ``MigPlacement``; NVIDIA's MIG user guide for the terms).

A MIG GPU's memory is cut into slices; a GPU instance of a profile (``1g.10gb``) covers
``size`` consecutive slices from ``start`` (NVML's ``nvmlGpuInstancePlacement_t``). Two
instances of one GPU never share a slice: that is the whole fit rule.
"""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class MigPlacement:
    """Slices ``[start, start + size)`` of a GPU (wire ``{"start": s, "size": n}``)."""

    start: int = attrs.field(validator=attrs.validators.ge(0))
    size: int = attrs.field(validator=attrs.validators.ge(1))

    def overlaps(self, other: MigPlacement) -> bool:
        """True when the two placements share a slice."""
        return self.start < other.start + other.size and other.start < self.start + self.size


@attrs.frozen(kw_only=True)
class MigProfile:
    """One MIG profile a GPU offers (inventory ``migProfiles``, PROTOCOL.md §2).

    Attributes:
        name: NVIDIA's profile name, e.g. ``1g.10gb``.
        memory_mib: memory of one instance, MiB (wire ``memoryMB``).
        cores_pct: its share of the GPU's SMs, percent rounded up (wire ``core``).
        slice_count: compute slices of one instance (wire ``sliceCount``).
        placements: where an instance may be (dynamic MIG: every possible placement
            NVML reports; static MIG: where the existing instances are).
    """

    name: str = attrs.field(validator=attrs.validators.min_len(1))
    memory_mib: int = attrs.field(validator=attrs.validators.ge(0))
    cores_pct: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    slice_count: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    placements: tuple[MigPlacement, ...] = ()


#: ``DeviceRequest.custom`` key of the MIG profile a request names (NVIDIA's
#: ``nvidia.com/mig-<profile>: N``: N instances of that profile, not N GPUs); the
#: ``hami simulate`` report names the profile from it.
MIG_PROFILE_INFO = "migProfile"


@attrs.frozen(kw_only=True)
class MigSlot:
    """One MIG instance a container holds or is given: its profile and placement."""

    profile: str
    placement: MigPlacement
