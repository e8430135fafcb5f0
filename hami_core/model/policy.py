"""Scheduling policies (PROTOCOL.md §5, HAMi's ``*-scheduler-policy`` annotations)."""

from __future__ import annotations

import enum

import attrs


class NodePolicy(enum.StrEnum):
    """How to rank feasible nodes: fill the busiest first, or the emptiest."""

    BINPACK = "binpack"
    SPREAD = "spread"


class DevicePolicy(enum.StrEnum):
    """How to choose devices inside a node."""

    BINPACK = "binpack"
    SPREAD = "spread"
    TOPOLOGY_AWARE = "topology-aware"
    NUMA = "numa"


#: The pod annotation naming the device policy (HAMi ``GPUSchedulerPolicyAnnotationKey``).
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
#: The device-policy token that is a filter, not an order: only devices nobody uses.
MUTEX = "mutex"
#: Every token a device policy (annotation, config, ``--gpu-policy``) may name.
DEVICE_POLICY_TOKENS: tuple[str, ...] = (*(m.value for m in DevicePolicy), MUTEX)


@attrs.frozen
class DevicePolicyChain:
    """A device policy as HAMi 2.10 writes it: one token or an ordered comma list.

    ``binpack``, ``spread``, ``topology-aware`` and ``numa`` order the devices: the first
    one written ranks, the next ones break ties. ``mutex`` is a filter: only devices no
    container uses are eligible (``ExclusiveDeviceAllocateConflict`` otherwise). A list
    without an ordering token ranks by ``default``. Source: HAMi 2.10
    ``pkg/util/util.go::PolicyContains``, ``pkg/scheduler/policy/gpu_policy.go``
    (``gpuSortKeyChain``: a list naming no sort key falls back to spread).

    Attributes:
        primary: the ranking policy, passed to ``hami_fit`` as ``policy``.
        tie_breaks: further ordering tokens, in the order written (duplicates dropped).
        mutex: True when ``mutex`` is named.
    """

    primary: DevicePolicy
    tie_breaks: tuple[DevicePolicy, ...] = ()
    mutex: bool = False

    @classmethod
    def parse(cls, value: str, *, default: DevicePolicy = DevicePolicy.SPREAD) -> DevicePolicyChain:
        """Read ``value`` (``"spread"``, ``"mutex,spread"``, ``" spread , numa "``; an
        empty entry, as in ``"spread,"``, names nothing and is skipped).

        Raises:
            ValueError: an empty list or an unknown token; the message names the token
                and the allowed ones.
        """
        tokens = [t.strip() for t in value.split(",")]
        if not any(tokens):
            raise ValueError(f"{value!r} names no policy")
        order: list[DevicePolicy] = []
        mutex = False
        for token in tokens:
            if not token:  # "spread," or "spread,,numa": HAMi's PolicyContains skips it
                continue
            if token == MUTEX:
                mutex = True
                continue
            try:
                policy = DevicePolicy(token)
            except ValueError:
                allowed = ", ".join(DEVICE_POLICY_TOKENS)
                raise ValueError(
                    f"{token!r} is not one of {allowed} (a comma list may combine them)"
                ) from None
            if policy not in order:
                order.append(policy)
        if not order:
            return cls(primary=default, mutex=mutex)
        return cls(primary=order[0], tie_breaks=tuple(order[1:]), mutex=mutex)

    def __str__(self) -> str:
        tokens = [self.primary.value, *(p.value for p in self.tie_breaks)]
        return ",".join([MUTEX, *tokens] if self.mutex else tokens)
