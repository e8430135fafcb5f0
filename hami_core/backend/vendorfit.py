"""A vendor's ``hami_fit`` as data: which annotations hold its filters, which rules it fits
by, and (rarely) its own placement step around the shared fit.

Every backend whose devices are shared by memory and cores fits the same way: read the
pod's device filters from the vendor's annotation keys (PROTOCOL.md §5), build its
``FitRules``, and call ``fit_devices``. ``VendorFit`` states the vendor's part of that
once, and is itself the vendor's fit function:

    fit = VendorFit(filters=FilterKeys(use_uuid=("hygon.com/use-gpuuuid",)))
    fit(request, node, usage, pod, policy)  # a FitResult

The five arguments are ``hami_fit``'s (``hami_core.plugin.hookspecs``); a sixth,
``extra``, is the one thing the vendor's rules read beyond them (its ``VendorConfig``, its
chip model, the pod's earlier containers' devices), passed through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

import attrs

from hami_core.model import (
    ContainerDevices,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    FitRules,
    NodeInfo,
)
from hami_core.plugin import hookimpl
from hami_core.protocol.config import VendorConfig

from .fit import GENERIC, DeviceFilters, fit_devices, type_matches
from .requests import annotations_of

Extra = TypeVar("Extra")

Pod = Mapping[str, Any]
#: A node's devices of one vendor with their usage, index order (``hami_fit``'s ``usage``).
Usage = Sequence[DeviceUsage]


def _keys(value: str | Iterable[str]) -> tuple[str, ...]:
    """One annotation key, or several in order of precedence, as a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


def _tokens(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen(kw_only=True)
class FilterKeys:
    """The pod annotations that hold one vendor's device filters (PROTOCOL.md §5).

    Each field lists the accepted keys of one filter, the first present wins (HAMi's
    name first, then the handbook's aliases); one key may be given as a plain string
    (HAMi's usual case); a vendor without a filter leaves it empty.

    Attributes:
        use_type, nouse_type: comma lists of model tokens the device must / must not match
            (e.g. ``nvidia.com/use-gputype``).
        use_uuid, nouse_uuid: comma lists of device UUIDs the pod may / must not use.
        numa_bind: ``"true"`` puts all devices of a container on one NUMA node.
        mode: the inventory modes the pod accepts (``nvidia.com/vgpu-mode``).
        vendor_tokens: lower-case type tokens that name the vendor rather than a model and
            so match every device (the handbook's ``hami.io/gpu-type: cambricon``).
    """

    use_type: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    nouse_type: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    use_uuid: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    nouse_uuid: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    numa_bind: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    mode: tuple[str, ...] = attrs.field(default=(), converter=_keys)
    vendor_tokens: frozenset[str] = attrs.field(default=frozenset(), converter=_tokens)

    def read(self, pod: Pod, *, require_type: Iterable[str] = ()) -> DeviceFilters:
        """The pod's filters under these keys (``DeviceFilters.from_annotations``; the
        ``hami.io/gpu-scheduler-policy`` ``mutex`` and tie-breaks are read for every
        vendor). ``require_type``: models the request itself names (Cambricon's
        model-qualified resources). A pod without annotations has no filters."""
        keys = attrs.asdict(self, recurse=False)
        return DeviceFilters.from_annotations(
            annotations_of(pod), require_type=require_type, **keys
        )

    def type_matches(self, model: str, token: str) -> bool:
        """Whether ``model`` matches a type-filter token: one of ``vendor_tokens`` (any
        case), or whole words of the model (``hami_core.backend.fit.type_matches``:
        ``P800`` matches ``P800-OAM``, not ``P8000``)."""
        return token.lower() in self.vendor_tokens or type_matches(model, token)


@attrs.frozen(kw_only=True)
class FitCall(Generic[Extra]):
    """One ``hami_fit`` call as ``VendorFit``'s steps see it: the hook's arguments (see
    ``hami_core.plugin.hookspecs.hami_fit`` for their shapes), the vendor's ``extra``, the
    pod's filters, and the rules in force (``GENERIC`` while ``VendorFit.rules`` builds
    them from the call; the built ones when ``VendorFit.place`` receives it)."""

    request: DeviceRequest
    node: NodeInfo
    usage: Usage
    pod: Pod
    policy: DevicePolicy
    extra: Extra
    filters: DeviceFilters
    rules: FitRules = GENERIC

    @property
    def annotations(self) -> Mapping[str, str]:
        """The pod's annotations (empty when it has none)."""
        return annotations_of(self.pod)

    def fit(self, *, request: DeviceRequest | None = None, usage: Usage | None = None) -> FitResult:
        """``fit_devices`` on this call's node, filters, policy and rules; ``request`` /
        ``usage`` replace the call's (a request resized to a node's profile, one mode's
        devices)."""
        return fit_devices(
            request or self.request,
            self.node,
            self.usage if usage is None else usage,
            self.filters,
            self.policy,
            self.rules,
        )


#: ``call`` -> the answer: the vendor's own step around ``FitCall.fit``.
Place = Callable[[FitCall[Any]], FitResult]


def _shared(call: FitCall[Any]) -> FitResult:
    return call.fit()


@attrs.frozen(kw_only=True)
class VendorFit(Generic[Extra]):
    """One vendor's fit, callable as ``fit(request, node, usage, pod, policy, extra)``.

    Attributes:
        filters: the vendor's filter annotation keys, or a function of the vendor key
            giving them (keys that name the chip: ``hami.io/use-<chip>-uuid``).
        require_type: ``(pod, extra)`` -> models the request names, which the device must
            match (Cambricon's model-qualified resources); None for none.
        rules: the vendor's ``FitRules``, or a function of the call building them (rules
            that read the request, the usage, the pod's annotations or ``extra``).
        place: ``call`` -> the answer: the vendor's own step around the shared fit
            (``call.fit()``, with the call's filters and rules), for what ``FitRules``
            cannot say: a request resized first (Enflame DRS profiles),
            devices grouped by mode (NVIDIA), slices rewritten after (AMD CU counts).
            Default: ``call.fit()``.
    """

    filters: FilterKeys | Callable[[str], FilterKeys] = FilterKeys()
    require_type: Callable[[Pod, Extra | None], Iterable[str]] | None = None
    rules: FitRules | Callable[[FitCall[Extra | None]], FitRules] = GENERIC
    place: Place = _shared

    def filters_of(self, pod: Pod, vendor: str = "", extra: Extra | None = None) -> DeviceFilters:
        """The pod's filters for the vendor key ``vendor`` (see ``FilterKeys.read``)."""
        keys = self.filters if isinstance(self.filters, FilterKeys) else self.filters(vendor)
        required = self.require_type(pod, extra) if self.require_type is not None else ()
        return keys.read(pod, require_type=required)

    def __call__(
        self,
        request: DeviceRequest,
        node: NodeInfo,
        usage: Usage,
        pod: Pod,
        policy: DevicePolicy,
        extra: Extra | None = None,
    ) -> FitResult:
        """Place one container's request on one node, or say per device why not
        (``hami_fit``'s contract); ``extra`` reaches ``require_type``, ``rules`` and
        ``place`` as ``FitCall.extra``."""
        return self.nodes(request, [(node, usage, ())], pod, policy, extra)[0]

    def nodes(
        self,
        request: DeviceRequest,
        nodes: Sequence[tuple[NodeInfo, Usage, Sequence[ContainerDevices]]],
        pod: Pod,
        policy: DevicePolicy,
        extra: Extra | None = None,
    ) -> list[FitResult]:
        """``hami_fit_nodes``: the fit on each ``(node, usage, allocated)`` of ``nodes``,
        in order, the pod's filter annotations read once; each answer is the one
        ``__call__`` gives for that node with the same ``extra`` (``allocated`` is not
        read: a vendor whose rules read it fits node by node)."""
        filters = self.filters_of(pod, request.vendor, extra)
        answers = []
        for node, usage, _ in nodes:
            call: FitCall[Extra | None] = FitCall(
                request=request,
                node=node,
                usage=usage,
                pod=pod,
                policy=policy,
                extra=extra,
                filters=filters,
            )
            rules = self.rules if isinstance(self.rules, FitRules) else self.rules(call)
            answers.append(self.place(attrs.evolve(call, rules=rules)))
        return answers

    def hook(self, extra: Literal["config", "allocated"] | None = None) -> Callable[..., FitResult]:
        """This fit as the backend's ``hami_fit`` implementation, marked: ``hami_fit =
        fit.hook()`` in its plugin module, instead of a wrapper restating the hook's
        arguments (pluggy passes an implementation the arguments its parameters name).

        Args:
            extra: the hook argument handed on as ``extra``: ``"config"`` (the backend's
                section), ``"allocated"`` (the pod's earlier containers' devices on the
                node), or None for none.
        """

        @hookimpl
        def hami_fit(
            request: DeviceRequest,
            node: NodeInfo,
            usage: Usage,
            pod: Pod,
            policy: DevicePolicy,
            config: VendorConfig,
            allocated: Sequence[ContainerDevices],
        ) -> FitResult:
            given: dict[str, Any] = {"config": config, "allocated": allocated}
            return self(request, node, usage, pod, policy, given[extra] if extra else None)

        return hami_fit
