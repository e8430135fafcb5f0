"""Which node and device policy applies to a pod: its annotations, else the config."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.errors import InvalidInputError
from hami_core.model import DevicePolicy, DevicePolicyChain, DeviceScoringWeights, NodePolicy
from hami_core.protocol.annotations import (
    DEVICE_SCORING_WEIGHTS,
    GPU_SCHEDULER_POLICY,
    NODE_SCHEDULER_POLICY,
)
from hami_core.protocol.config import HamiConfig


@attrs.frozen
class Policies:
    """A pod's policies. ``device`` is the ranking policy given to ``hami_fit``;
    ``device_chain`` the whole of what was written (mutex, tie-breaks); ``weights`` the
    pod's ``hami.io/device-scoring-weights`` (None when it writes none; backends read it
    from the pod, ``fit.DeviceFilters``)."""

    node: NodePolicy
    device: DevicePolicy
    device_chain: DevicePolicyChain = attrs.field()
    weights: DeviceScoringWeights | None = None

    @device_chain.default
    def _chain(self) -> DevicePolicyChain:
        return DevicePolicyChain(primary=self.device)


def device_policy_option(value: str, where: str) -> DevicePolicyChain:
    """A device policy given as an option (``--gpu-policy``, a server's options), read as
    the ``hami.io/gpu-scheduler-policy`` annotation is: one token or HAMi 2.10's ordered
    comma list (``spread,numa``, ``mutex,spread``), the same tokens and message.

    Raises:
        InvalidInputError: an empty list or an unknown token; the message starts with
            ``where`` (the option's name) and lists the allowed tokens.
    """
    try:
        return DevicePolicyChain.parse(value)
    except ValueError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None


def node_policy_option(value: str, where: str) -> NodePolicy:
    """A node policy given as an option, read as ``hami.io/node-scheduler-policy`` is: one
    token, blanks around it ignored (HAMi 2.10's node policy is one name: ``pkg/scheduler/
    policy/node_policy.go`` compares it with ``spread``, anything else ranks as binpack;
    we refuse unknown names instead).

    Raises:
        InvalidInputError: not ``binpack`` or ``spread``; the message starts with ``where``.
    """
    policy: NodePolicy = _pick({where: value}, where, NodePolicy, None, label=where)
    return policy


def resolve_policies(
    pod: Mapping[str, Any],
    config: HamiConfig,
    *,
    node: NodePolicy | None = None,
    device: DevicePolicy | DevicePolicyChain | None = None,
) -> Policies:
    """The pod's policies: ``hami.io/node-scheduler-policy`` and
    ``hami.io/gpu-scheduler-policy`` annotations win over ``node`` / ``device``
    overrides (a single policy or a whole chain such as ``mutex,spread``), which win
    over the configured defaults.

    Raises:
        InvalidInputError: an annotation names an unknown policy (never a silent default),
            or ``hami.io/device-scoring-weights`` is malformed (HAMi 2.10 refuses to
            schedule such a pod, ``score.go`` ``calcScoreWithOptions``; the webhook denies
            it); the message names the annotation, the value and HAMi's reason.
    """
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    if isinstance(device, DevicePolicyChain):
        default_chain = device
    elif device is not None:
        default_chain = DevicePolicyChain(primary=device)
    else:
        default_chain = config.device_policy_chain or DevicePolicyChain(
            primary=config.device_policy
        )
    chain = default_chain
    if GPU_SCHEDULER_POLICY in ann:
        try:
            chain = DevicePolicyChain.parse(str(ann[GPU_SCHEDULER_POLICY]))
        except ValueError as exc:
            raise InvalidInputError(f"annotation {GPU_SCHEDULER_POLICY}: {exc}") from None
    weights = None
    if DEVICE_SCORING_WEIGHTS in ann:
        value = str(ann[DEVICE_SCORING_WEIGHTS])
        try:
            weights = DeviceScoringWeights.parse(value)
        except ValueError as exc:
            raise InvalidInputError(
                f"annotation {DEVICE_SCORING_WEIGHTS}: {value!r}: {exc} (write "
                "slot=<n>,core=<n>,memory=<n>, non-negative integers, one at least positive)"
            ) from None
    return Policies(
        node=_pick(ann, NODE_SCHEDULER_POLICY, NodePolicy, node or config.node_policy),
        device=chain.primary,
        device_chain=chain,
        weights=weights,
    )


def default_device_chain(
    config: HamiConfig, device: DevicePolicy | DevicePolicyChain | None = None
) -> DevicePolicyChain:
    """The device policy of a pod that names none: ``device`` (a server's override) or
    the configured default (``resolve_policies``' fallback)."""
    return resolve_policies({}, config, device=device).device_chain


def holds_exclusively(annotations: Mapping[str, Any], default: DevicePolicyChain) -> bool:
    """True when a pod with ``annotations`` is placed, or holds its devices, under
    ``mutex`` (HAMi#3038): its ``hami.io/gpu-scheduler-policy`` names it, or it names no
    policy and ``default`` (``default_device_chain``) does. A device such a pod holds
    takes no other pod, and such a pod takes no device another pod holds. An unreadable
    value counts as ``mutex`` (fail closed: the scheduler places no such pod and the
    webhook lets no placed pod change it, so only a pod that bypassed both has one)."""
    if GPU_SCHEDULER_POLICY not in annotations:
        return default.mutex
    return _names_mutex(str(annotations[GPU_SCHEDULER_POLICY]))


@functools.lru_cache(maxsize=256)
def _names_mutex(value: str) -> bool:
    # read for every holder of every device a fit looks at: a handful of distinct values
    try:
        return DevicePolicyChain.parse(value).mutex
    except ValueError:
        return True


def with_device_policy(pod: Mapping[str, Any], chain: DevicePolicyChain) -> Mapping[str, Any]:
    """The pod as backends should see it: when the device policy is a default that a
    single token cannot say (``mutex`` or tie-breaks) and the pod names none, a shallow
    copy carrying it in ``hami.io/gpu-scheduler-policy`` (where backends read the filter,
    as HAMi's do); otherwise ``pod`` itself."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    if GPU_SCHEDULER_POLICY in ann or not (chain.mutex or chain.tie_breaks):
        return pod
    meta = dict(pod.get("metadata") or {})
    meta["annotations"] = {**ann, GPU_SCHEDULER_POLICY: str(chain)}
    return {**pod, "metadata": meta}


def _pick(
    ann: Mapping[str, str], key: str, kind: Any, default: Any, *, label: str | None = None
) -> Any:
    if key not in ann:
        return default
    try:
        return kind(ann[key].strip())
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        where = label or f"annotation {key}"
        raise InvalidInputError(f"{where}: {ann[key]!r} is not one of {allowed}") from None
