"""``BackendManager``: the one typed facade over the hooks.

It loads backends from the ``hami.backends`` entry-point group (minus
``HAMI_DISABLED_BACKENDS``), validates them at load (a misspelt ``hami_*`` function fails
here, not at 3 a.m.), dispatches calls by vendor key, and checks every returned value,
turning a contract break into a ``BackendError`` that names the backend.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar, cast

import attrs
import pluggy

from hami_core.errors import BackendError, ConfigError, HamiError
from hami_core.model import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    ContainerUsage,
    DeviceInfo,
    DevicePluginFlags,
    DevicePolicy,
    DeviceRequest,
    DeviceTypeInfo,
    DeviceUsage,
    FitResult,
    HostDevice,
    MemoryNodeState,
    MutateResult,
    NodeInfo,
    NodePolicy,
    NodeState,
    PodDevices,
    ScopedNodeState,
)
from hami_core.protocol.config import HamiConfig, VendorConfig

from . import hookspecs
from .hookspecs import Container, Pod

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hami.backends"
#: Answers of ``hami_parse_request`` kept (``parse_requests``); when full it starts over.
REQUEST_MEMO_SIZE = 4096
DISABLE_ENV = "HAMI_DISABLED_BACKENDS"


def disabled_backends(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The backend names ``HAMI_DISABLED_BACKENDS`` lists (comma-separated, spaces around
    a name and empty entries ignored), read from ``environ`` (default ``os.environ``):
    the one reading of the variable, for the managers and for ``hami``'s backend
    commands."""
    value = (os.environ if environ is None else environ).get(DISABLE_ENV, "")
    return frozenset(n.strip() for n in value.split(",") if n.strip())


T = TypeVar("T")


class _PluginManager(pluggy.PluginManager):
    """Treat every ``hami_*`` function as a hook implementation, marked or not.

    Without this, a misspelt and unmarked ``hami_fitt`` would be silently ignored;
    with it, ``check_pending()`` rejects it at load (pytest does the same for
    ``pytest_*``).
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if (
            opts is None
            and name.startswith("hami_")
            and inspect.isroutine(getattr(plugin, name, None))
        ):
            return {}
        return opts


@attrs.frozen(kw_only=True)
class BackendRecord:
    """A loaded backend: its name, distribution version, info and implemented hooks."""

    name: str
    version: str
    info: BackendInfo
    hooks: tuple[str, ...]

    @property
    def serves_nodes(self) -> bool:
        """Whether hami's device plugin can run this backend's nodes: it implements
        ``hami_discover`` (else its ``info.vendor_device_plugin`` runs them)."""
        return "hami_discover" in self.hooks


class BackendManager:
    """Loads backends and is the only caller of their hooks.

    Use ``BackendManager.from_entry_points()`` in programs and
    ``BackendManager.from_plugins({...})`` in tests.
    """

    def __init__(
        self,
        plugins: Mapping[str, object],
        *,
        config: HamiConfig | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> None:
        """Register ``plugins`` (name -> module or object holding hookimpls).

        Raises:
            BackendError: a plugin has an unknown ``hami_*`` hook, a signature that
                does not match its spec, no or a wrong ``hami_backend_info``, or a
                vendor key another backend already serves.
        """
        self._pm = _PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self.config = config or HamiConfig()
        self._records: dict[str, BackendRecord] = {}
        self._by_vendor: dict[str, str] = {}
        self._callers: dict[tuple[str, str], Any] = {}
        self._sections: dict[str, VendorConfig] = {}
        # (init, the container's JSON[, the declared annotations' values]) -> the answers
        # of the backends whose hook is kept (``_pod_reading`` not ``_WHOLE_POD``), by name
        self._request_memo: dict[tuple[Any, ...], dict[str, DeviceRequest | None]] = {}
        self._pod_reads: dict[str, frozenset[str] | None] = {}
        self._declared: tuple[str, ...] | None = None
        for name in sorted(plugins):
            try:
                self._pm.register(plugins[name], name=name)
            except pluggy.PluginValidationError as exc:
                raise BackendError(name, f"invalid hook implementation: {exc}") from exc
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            plugin_name = self._pm.get_name(exc.plugin) or "?"
            raise BackendError(plugin_name, f"unknown hook: {exc}") from exc
        for name in sorted(plugins):
            info = self._call_one(name, "hami_backend_info", BackendInfo)
            if info is None:
                raise BackendError(name, "hami_backend_info is required and returned None")
            if info.name != name:
                raise BackendError(name, f"hami_backend_info names itself {info.name!r}")
            for vendor in info.vendors:
                if vendor in self._by_vendor:
                    raise BackendError(
                        name,
                        f"vendor key {vendor!r} is already served by {self._by_vendor[vendor]!r}",
                    )
                self._by_vendor[vendor] = name
            hooks = tuple(
                sorted(
                    impl_name
                    for impl_name in dir(plugins[name])
                    if impl_name.startswith("hami_") and impl_name != "hami_backend_info"
                )
            )
            if "hami_link_scores" in hooks:
                silent = [t.vendor for t in info.device_types if not t.link_score_annotation]
                if silent:
                    raise BackendError(
                        name,
                        f"implements hami_link_scores but vendor keys {silent} declare no "
                        "link_score_annotation to publish them under",
                    )
            self._records[name] = BackendRecord(
                name=name, version=(versions or {}).get(name, ""), info=info, hooks=hooks
            )
        for name, record in self._records.items():
            self._sections[name] = self._checked_section(name, record.info)
        self._types: dict[str, tuple[DeviceTypeInfo, ...]] = {
            name: tuple(
                _configured(t, self._sections[name], single=len(r.info.device_types) == 1)
                for t in r.info.device_types
            )
            for name, r in self._records.items()
        }

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_entry_points(
        cls,
        *,
        config: HamiConfig | None = None,
        disabled: Iterable[str] | None = None,
        group: str = ENTRY_POINT_GROUP,
    ) -> BackendManager:
        """Load every backend of the entry-point group, minus the disabled ones.

        Args:
            disabled: backend names to skip; default: the comma list in the
                ``HAMI_DISABLED_BACKENDS`` environment variable.

        Raises:
            BackendError: an entry point fails to import or breaks the contract.
        """
        blocked = disabled_backends() if disabled is None else {n for n in disabled if n}
        plugins: dict[str, object] = {}
        versions: dict[str, str] = {}
        found = sorted(entry_points(group=group), key=lambda e: e.name)
        unknown = blocked - {ep.name for ep in found}
        if unknown:
            log.warning(
                "%s names backends that are not installed: %s (installed: %s)",
                DISABLE_ENV,
                ", ".join(sorted(unknown)),
                ", ".join(ep.name for ep in found) or "none",
            )
        for ep in found:
            if ep.name in blocked or ep.name in plugins:
                continue
            plugins[ep.name] = _load(ep)
            versions[ep.name] = ep.dist.version if ep.dist is not None else ""
        return cls(plugins, config=config, versions=versions)

    @classmethod
    def from_plugins(
        cls, plugins: Mapping[str, object], *, config: HamiConfig | None = None
    ) -> BackendManager:
        """Register plugin objects directly (tests, embedding)."""
        return cls(plugins, config=config)

    def with_config(self, config: HamiConfig) -> BackendManager:
        """The same backends under another configuration."""
        plugins = {name: self._pm.get_plugin(name) for name in self._records}
        versions = {name: r.version for name, r in self._records.items()}
        return BackendManager(plugins, config=config, versions=versions)

    # -- introspection --------------------------------------------------------------

    @property
    def backends(self) -> tuple[BackendRecord, ...]:
        """Loaded backends, by name."""
        return tuple(self._records[n] for n in sorted(self._records))

    @property
    def infos(self) -> dict[str, BackendInfo]:
        """Backend name -> ``BackendInfo``."""
        return {n: r.info for n, r in sorted(self._records.items())}

    @property
    def vendors(self) -> tuple[str, ...]:
        """Every vendor key served, sorted."""
        return tuple(sorted(self._by_vendor))

    def device_types(self) -> tuple[DeviceTypeInfo, ...]:
        """Every ``DeviceTypeInfo`` of every backend, by backend then declaration, under
        the configuration (``memory_unit_option`` folded into the memory unit, the
        section's resource names in force: ``_configured``)."""
        return tuple(t for name in sorted(self._types) for t in self._types[name])

    def device_type(self, vendor: str) -> DeviceTypeInfo:
        """The ``DeviceTypeInfo`` of a vendor key, under the configuration. Raises
        ``KeyError`` when unknown."""
        return next(t for t in self._types[self.backend_of(vendor)] if t.vendor == vendor)

    def backend_of(self, vendor: str) -> str:
        """Name of the backend serving ``vendor``. Raises ``KeyError`` when none."""
        try:
            return self._by_vendor[vendor]
        except KeyError:
            raise KeyError(f"no installed backend serves vendor {vendor!r}") from None

    def vendor_config(self, backend: str) -> VendorConfig:
        """The configuration section of a backend, complete (``options`` merged with the
        backend's ``option_defaults``) and checked (``settings`` is what the backend's
        ``hami_check_config`` returned). Raises ``KeyError`` for an unknown backend."""
        return self._sections[backend]

    def _checked_section(self, name: str, info: BackendInfo) -> VendorConfig:
        stated = self.config.vendors.get(name)
        section = (
            VendorConfig.defaults(info)
            if stated is None
            else attrs.evolve(stated, options={**info.option_defaults, **stated.options})
        )
        try:
            settings = self._call_one(name, "hami_check_config", object, config=section)
        except ConfigError as exc:  # named as the file writes it, after the file's path
            raise ConfigError(self.config.located(str(exc))) from None
        return attrs.evolve(section, settings=settings)

    # -- hooks ----------------------------------------------------------------------

    def parse_requests(self, pod: Pod, container: Container, *, init: bool) -> list[DeviceRequest]:
        """Every backend's request for one container (usually zero or one), by backend name.

        A backend whose hook does not name ``pod`` answers from the container, ``init``
        and its configuration alone; one that declares the pod annotations it reads
        (``reads_pod_annotations``) is given only those. Both answers are kept by the
        container's content and the values of every declared annotation (at most
        ``REQUEST_MEMO_SIZE`` keys; errors are not kept), so the replicas of one
        Deployment cost one parse per backend when a cluster's pods are read from
        scratch. A hook that names ``pod`` without a declaration is asked every time.

        Raises:
            InvalidInputError: a backend found a malformed quantity.
            BackendError: a backend broke the contract.
        """
        key = self._memo_key(pod, container, init)
        kept = self._request_memo.get(key) if key is not None else None
        fresh: dict[str, DeviceRequest | None] = {}
        out = []
        for name in self._records:
            if kept is not None and name in kept:
                req = kept[name]
            else:
                reads = self._pod_reading(name)
                req = self._parse_one(name, _pod_view(pod, reads), container, init)
                if reads is not _WHOLE_POD:
                    fresh[name] = req
            if req is not None:
                out.append(req)
        if key is not None and kept is None and fresh:
            if len(self._request_memo) >= REQUEST_MEMO_SIZE:
                self._request_memo.clear()
            self._request_memo[key] = fresh
        return out

    def request_key(self, pod: Pod) -> tuple[Any, ...] | None:
        """A key equal for two pods whose ``parse_requests`` answers are the same for
        every container: their containers (init ones included) as JSON and the values of
        every annotation a backend declares reading. None when no such key exists: a
        backend's ``hami_parse_request`` reads the pod without declaring what, or the
        containers are not JSON, or such an annotation is not a string. For callers that
        keep what they derive from a pod's requests across the replicas of one
        Deployment (``facts.holdings``)."""
        if any(self._pod_reading(name) is _WHOLE_POD for name in self._records):
            return None
        spec = pod.get("spec") if isinstance(pod, Mapping) else None
        if not isinstance(spec, Mapping):
            return None
        try:
            content = json.dumps(
                [spec.get("initContainers"), spec.get("containers")], separators=(",", ":")
            )
        except (TypeError, ValueError):
            return None
        values = self._declared_values(pod)
        return None if values is None else (content, values)

    def request_memo_size(self) -> int:
        """How many container readings ``parse_requests`` keeps now (at most
        ``REQUEST_MEMO_SIZE``)."""
        return len(self._request_memo)

    def _memo_key(self, pod: Pod, container: Container, init: bool) -> tuple[Any, ...] | None:
        """The memo's key of one container: ``init``, the container as JSON and the values
        of every annotation a backend declares reading; None (nothing kept) when the
        container is not JSON or such an annotation is not a string (no API server sends
        either)."""
        content = _json_or_none(container)
        if content is None:
            return None
        if not self._declared_annotations():
            return (init, content)
        values = self._declared_values(pod)
        return None if values is None else (init, content, values)

    def _declared_values(self, pod: Pod) -> tuple[str | None, ...] | None:
        """The pod's value of every annotation a backend declares reading (None where
        it has none); None when one of them is not a string."""
        ann = _annotations(pod)
        values = tuple(ann.get(k) for k in self._declared_annotations())
        if not all(v is None or isinstance(v, str) for v in values):
            return None
        return values

    def _declared_annotations(self) -> tuple[str, ...]:
        """Every annotation key a backend's ``hami_parse_request`` declares, sorted."""
        if self._declared is None:
            keys: set[str] = set()
            for name in self._records:
                reads = self._pod_reading(name)
                if reads is not None and reads is not _WHOLE_POD:
                    keys |= reads
            self._declared = tuple(sorted(keys))
        return self._declared

    def _parse_one(
        self, name: str, pod: Pod, container: Container, init: bool
    ) -> DeviceRequest | None:
        req: DeviceRequest | None = self._call_one(
            name,
            "hami_parse_request",
            DeviceRequest,
            pod=pod,
            container=container,
            init=init,
            config=self.vendor_config(name),
        )
        if req is not None and self._by_vendor.get(req.vendor) != name:
            raise BackendError(
                name, f"hami_parse_request returned vendor {req.vendor!r}, not its own"
            )
        return req

    def _pod_reading(self, name: str) -> frozenset[str] | None:
        """What backend ``name``'s ``hami_parse_request`` reads of the pod: None when it
        does not name ``pod`` (pluggy passes a hook only the arguments it names: it
        answers from the container, ``init`` and its configuration alone), the annotation
        keys it declares (``reads_pod_annotations``), else ``_WHOLE_POD``."""
        if name not in self._pod_reads:
            impls = [
                i for i in self._pm.hook.hami_parse_request.get_hookimpls() if i.plugin_name == name
            ]
            reads: frozenset[str] | None = _WHOLE_POD
            if impls and not any("pod" in i.argnames for i in impls):
                reads = None
            elif impls:
                declared = [
                    getattr(i.function, hookspecs.POD_ANNOTATIONS_ATTR, None) for i in impls
                ]
                keys = [d for d in declared if isinstance(d, frozenset)]
                if len(keys) == len(declared):
                    reads = frozenset(k for d in keys for k in d)
            self._pod_reads[name] = reads
        return self._pod_reads[name]

    def mutate(
        self,
        pod: Pod,
        container: Container,
        *,
        container_path: str,
        requests: Sequence[DeviceRequest],
    ) -> list[tuple[str, MutateResult]]:
        """The mutation of one container by the backend of each of its parsed requests
        (``parse_requests``), as (backend name, result)."""
        out = []
        for request in requests:
            name = self.backend_of(request.vendor)
            res = self._call_one(
                name,
                "hami_mutate",
                MutateResult,
                pod=pod,
                container=container,
                container_path=container_path,
                config=self.vendor_config(name),
                request=request,
            )
            if res is not None:
                out.append((name, res))
        return out

    def fit(
        self,
        request: DeviceRequest,
        node: NodeInfo,
        usage: Sequence[DeviceUsage],
        *,
        pod: Pod,
        policy: DevicePolicy,
        allocated: Sequence[ContainerDevices] = (),
    ) -> FitResult:
        """Ask the backend of ``request.vendor`` to place the request on ``node``
        (``allocated``: the pod's earlier containers' devices of the vendor, see the
        ``hami_fit`` spec).

        Raises:
            BackendError: the backend returned something other than a ``FitResult``,
                or a placement that is not ``request.count`` distinct devices of the
                node.
        """
        name = self.backend_of(request.vendor)
        usage = tuple(usage)
        result = self._call_one(
            name,
            "hami_fit",
            FitResult,
            request=request,
            node=node,
            usage=usage,
            pod=pod,
            policy=policy,
            config=self.vendor_config(name),
            allocated=tuple(allocated),
        )
        return _checked_fit(name, "hami_fit", request, usage, result)

    def fit_nodes(
        self,
        request: DeviceRequest,
        nodes: Sequence[tuple[NodeInfo, Sequence[DeviceUsage], Sequence[ContainerDevices]]],
        *,
        pod: Pod,
        policy: DevicePolicy,
    ) -> list[FitResult]:
        """``fit`` on many nodes in one dispatch: the backend's ``hami_fit_nodes`` when
        it implements that optional hook, else its ``hami_fit`` once per node (the
        core's default, so a backend with only ``hami_fit`` works unchanged).

        Args:
            nodes: ``(node, usage of its devices of request.vendor, allocated)``
                triples; ``allocated`` as ``fit``'s, for that node.

        Returns:
            One ``FitResult`` per node, in order.

        Raises:
            BackendError: as ``fit``, for any node; or a batch answer whose length is
                not the number of nodes.
        """
        if not nodes:
            return []
        name = self.backend_of(request.vendor)
        batch = [(node, tuple(usage), tuple(allocated)) for node, usage, allocated in nodes]
        results = self._call_one(
            name,
            "hami_fit_nodes",
            (list, tuple),
            request=request,
            nodes=batch,
            pod=pod,
            policy=policy,
            config=self.vendor_config(name),
        )
        if results is None:
            return [
                self.fit(request, node, usage, pod=pod, policy=policy, allocated=allocated)
                for node, usage, allocated in batch
            ]
        if len(results) != len(batch):
            raise BackendError(
                name, f"hami_fit_nodes answered {len(results)} results for {len(batch)} nodes"
            )
        return [
            _checked_fit(name, "hami_fit_nodes", request, usage, result)
            for (_, usage, _), result in zip(batch, results, strict=True)
        ]

    def score(
        self,
        vendor: str,
        node: NodeInfo,
        usage: Sequence[DeviceUsage],
        devices: ContainerDevices,
        *,
        policy: NodePolicy,
        pod: Pod | None = None,
    ) -> float | None:
        """The vendor backend's 0..100 score of a placement, or None if it has none."""
        name = self.backend_of(vendor)
        value = self._call_one(
            name,
            "hami_score",
            (int, float),
            node=node,
            usage=tuple(usage),
            devices=devices,
            policy=policy,
            config=self.vendor_config(name),
            pod={} if pod is None else pod,
        )
        if value is not None and not 0 <= value <= 100:
            raise BackendError(name, f"hami_score returned {value}, outside 0..100")
        return None if value is None else float(value)

    def with_device_plugin_flags(
        self, backend: str, flags: DevicePluginFlags, config: HamiConfig
    ) -> HamiConfig:
        """``config`` with ``backend``'s section under HAMi's device-plugin ``flags``, as
        its ``hami_device_plugin_flags`` applies them; each flag given (``flags.given``)
        that the backend does not read (``BackendInfo.device_plugin_flags``) is logged as
        ignored. An unknown ``backend``: ``config`` unchanged (the caller names it).

        Raises:
            BackendError: the hook answered something other than a ``VendorConfig``.
        """
        info = self.infos.get(backend)
        if info is None:
            return config
        for flag in flags.given():
            if flag not in info.device_plugin_flags:
                log.warning("%s: ignored, backend %s has no such setting", flag, backend)
        if not info.device_plugin_flags:
            return config
        stated = config.vendors.get(backend) or VendorConfig()
        section = self._call_one(
            backend, "hami_device_plugin_flags", VendorConfig, flags=flags, config=stated
        )
        if section is None:
            return config
        return attrs.evolve(config, vendors={**config.vendors, backend: section})

    def prepare_node(self, backend: str) -> list[str]:
        """Let one backend install its node-side files; returns the paths it names."""
        paths = self._call_one(
            backend, "hami_prepare_node", list, config=self.vendor_config(backend)
        )
        if paths is None:
            return []
        if not all(isinstance(p, str) for p in paths):
            raise BackendError(
                backend, f"hami_prepare_node returned {paths!r}, not a list of paths"
            )
        return list(paths)

    def discover(self, backend: str) -> list[DeviceInfo] | None:
        """Devices one backend finds on this node, or None when it cannot discover."""
        devices = self._call_one(backend, "hami_discover", list, config=self.vendor_config(backend))
        if devices is not None:
            vendors = self._records[backend].info.vendors
            for d in devices:
                if not isinstance(d, DeviceInfo) or d.vendor not in vendors:
                    raise BackendError(
                        backend, f"hami_discover returned {d!r}, not a DeviceInfo of {vendors}"
                    )
        return cast("list[DeviceInfo] | None", devices)

    def node_devices(self, vendor: str, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
        """The vendor backend's reading of a Node object (``hami_node_devices``), or None
        when the core is to decode the vendor's register annotation.

        Raises:
            AnnotationError: the node's value is malformed (the caller marks the vendor
                unregistered on that node).
            BackendError: the answer is not a list of this vendor's ``DeviceInfo``.
        """
        name = self.backend_of(vendor)
        devices = self._call_one(
            name,
            "hami_node_devices",
            list,
            node=node,
            vendor=vendor,
            config=self.vendor_config(name),
        )
        if devices is None:
            return None
        for d in devices:
            if not isinstance(d, DeviceInfo) or d.vendor != vendor:
                raise BackendError(
                    name, f"hami_node_devices returned {d!r}, not a DeviceInfo of {vendor!r}"
                )
        return list(devices)

    def watch_health(self, backend: str, *, timeout_s: float) -> tuple[str, ...] | None:
        """Block up to ``timeout_s`` for a health change of one backend's devices.

        Returns: the UUIDs the backend says may have changed (empty on timeout), or
            None when the backend does not watch health.
        Raises:
            BackendError: the backend raised or answered something other than a list of
                UUIDs.
        """
        changed = self._call_one(
            backend,
            "hami_watch_health",
            (list, tuple),
            config=self.vendor_config(backend),
            timeout_s=timeout_s,
        )
        if changed is None:
            return None
        if not all(isinstance(u, str) for u in changed):
            raise BackendError(backend, f"hami_watch_health returned {changed!r}, not UUIDs")
        return tuple(changed)

    def release(
        self,
        backend: str,
        pods: Sequence[Mapping[str, Any]],
        devices: Sequence[DeviceInfo],
        *,
        state: NodeState | None = None,
    ) -> tuple[str, ...]:
        """What one backend freed on this node (``hami_release``); () when nothing.

        ``state``: the node's records, as for ``allocate`` (default: an empty one).

        Raises:
            BackendError: the backend raised or answered something other than lines.
        """
        freed = self._call_one(
            backend,
            "hami_release",
            (list, tuple),
            pods=tuple(pods),
            devices=tuple(devices),
            config=self.vendor_config(backend),
            state=ScopedNodeState(state if state is not None else MemoryNodeState(), backend),
        )
        if freed is None:
            return ()
        if not all(isinstance(x, str) for x in freed):
            raise BackendError(backend, f"hami_release returned {freed!r}, not lines")
        return tuple(freed)

    def link_scores(
        self, backend: str, devices: Sequence[DeviceInfo]
    ) -> dict[str, dict[str, int]] | None:
        """One backend's pair scores between ``devices`` (``{uuid: {other: score}}``),
        or None when it has none.

        Raises:
            BackendError: the answer is not a mapping of mappings to non-negative ints.
        """
        scores = self._call_one(
            backend,
            "hami_link_scores",
            Mapping,
            devices=tuple(devices),
            config=self.vendor_config(backend),
        )
        if scores is None:
            return None
        out: dict[str, dict[str, int]] = {}
        for uuid, row in scores.items():
            if not isinstance(uuid, str) or not isinstance(row, Mapping):
                raise BackendError(backend, f"hami_link_scores: bad row {uuid!r}: {row!r}")
            for other, score in row.items():
                if (
                    not isinstance(other, str)
                    or not isinstance(score, int)
                    or isinstance(score, bool)
                    or score < 0
                ):
                    raise BackendError(
                        backend, f"hami_link_scores: bad score {uuid}->{other!r}: {score!r}"
                    )
            out[uuid] = {str(k): int(v) for k, v in row.items()}
        return out

    def bind_annotations(
        self, vendor: str, pod: Pod, node: NodeInfo, devices: PodDevices
    ) -> dict[str, str]:
        """The vendor backend's extra pod annotations for a bind (empty when none).

        Raises:
            BackendError: the answer is not a mapping of strings to strings, or it
                names a key the core writes itself.
        """
        name = self.backend_of(vendor)
        res = self._call_one(
            name,
            "hami_bind_annotations",
            Mapping,
            pod=pod,
            vendor=vendor,
            node=node,
            devices=devices,
            config=self.vendor_config(name),
        )
        if res is None:
            return {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in res.items()):
            raise BackendError(name, f"hami_bind_annotations returned {res!r}, not str -> str")
        reserved = {t.to_allocate_annotation for t in self.device_types()} | {
            t.allocated_annotation for t in self.device_types()
        }
        clash = sorted(
            k
            for k in res
            if k in reserved or k.startswith("hami.io/vgpu-") or k.startswith("hami.io/bind-")
        )
        if clash:
            raise BackendError(name, f"hami_bind_annotations may not write {clash}")
        return dict(res)

    def allocate(
        self,
        vendor: str,
        pod: Pod,
        container: Container,
        devices: ContainerDevices,
        *,
        node_devices: Sequence[DeviceInfo] = (),
        state: NodeState | None = None,
    ) -> ContainerAllocation:
        """What kubelet adds to one container for its ``vendor`` devices.

        Args:
            node_devices: the node's discovered devices, for backends that map UUIDs
                to indices (empty when not known, e.g. in ``hami simulate``).
            state: the node's records (the device plugin: files under
                ``--state-dir``); the backend sees only its own (``ScopedNodeState``).
                Default: a fresh ``MemoryNodeState``, nothing kept between calls.
        """
        name = self.backend_of(vendor)
        scoped = ScopedNodeState(state if state is not None else MemoryNodeState(), name)
        res = self._call_one(
            name,
            "hami_allocate",
            ContainerAllocation,
            pod=pod,
            container=container,
            devices=devices,
            config=self.vendor_config(name),
            node_devices=tuple(node_devices),
            state=scoped,
        )
        if res is None:
            raise BackendError(name, f"hami_allocate returned None for its own vendor {vendor!r}")
        return cast(ContainerAllocation, res)

    def usage_files(self, backend: str) -> dict[str, tuple[int, ...]]:
        """The per-container usage files one backend names (``{file name: accepted
        sizes in bytes}``; a backend may answer one size or a tuple of them, e.g. two
        layout versions), empty when it has none.

        Raises:
            BackendError: a name holds a path separator, or a size is not a positive int.
        """
        files = self._call_one(
            backend, "hami_usage_files", Mapping, config=self.vendor_config(backend)
        )
        if files is None:
            return {}
        out: dict[str, tuple[int, ...]] = {}
        for name, size in files.items():
            sizes = size if isinstance(size, tuple) else (size,)
            if (
                not isinstance(name, str)
                or not name
                or "/" in name
                or name in (".", "..")
                or not sizes
                or not all(_positive_int(n) for n in sizes)
            ):
                raise BackendError(backend, f"hami_usage_files: bad entry {name!r}: {size!r}")
            out[name] = tuple(sizes)
        return out

    def parse_usage(self, backend: str, name: str, data: bytes) -> ContainerUsage | None:
        """One backend's decoding of a usage file it named (None: not its file).

        Raises:
            InvalidInputError: the file is corrupt or foreign (the backend says why).
            BackendError: the backend raised anything else or answered another type.
        """
        usage = self._call_one(
            backend,
            "hami_parse_usage",
            ContainerUsage,
            file_name=name,
            data=data,
            config=self.vendor_config(backend),
        )
        return cast("ContainerUsage | None", usage)

    def host_devices(self, backend: str) -> list[HostDevice] | None:
        """One backend's host figures of its devices (None: no driver on this node).

        Raises:
            HamiError: the driver failed (a ``BackendError`` when the backend raised
                something else or answered other than a list of ``HostDevice``).
        """
        devices = self._call_one(
            backend, "hami_host_devices", list, config=self.vendor_config(backend)
        )
        if devices is not None and not all(isinstance(d, HostDevice) for d in devices):
            raise BackendError(backend, f"hami_host_devices returned {devices!r}")
        return cast("list[HostDevice] | None", devices)

    def call_backend(self, backend: str, hook: str, **kwargs: Any) -> Any:
        """Call one backend's hook and return its raw answer (None when it has none).

        For the conformance kit, which must see what a backend returns for requests
        of other vendors; everything else uses the typed methods above.
        """
        return self._call_one(backend, hook, object, **kwargs)

    # -- internals ------------------------------------------------------------------

    def _call_one(self, name: str, hook: str, expected: Any, **kwargs: Any) -> Any:
        caller = self._caller(name, hook)
        if caller is None:
            return None  # the backend does not implement the hook: no answer
        try:
            results = caller(**kwargs)
        except HamiError:
            raise
        except Exception as exc:
            raise BackendError(name, f"{hook} raised {type(exc).__name__}: {exc}") from exc
        if not results:
            return None
        value = results[0]
        if not isinstance(value, expected) or isinstance(value, bool):
            want = (
                " or ".join(t.__name__ for t in expected)
                if isinstance(expected, tuple)
                else expected.__name__
            )
            raise BackendError(name, f"{hook} returned {type(value).__name__}, expected {want}")
        return value

    def _caller(self, name: str, hook: str) -> Callable[..., list[Any]] | None:
        """The hook of backend ``name`` alone, or None when it implements none: most
        backends leave most optional hooks out, and a call through pluggy that reaches
        no implementation still costs microseconds (``hami_node_devices`` is asked for
        every vendor on every node event: 24 calls a node, 20 of them to nothing)."""
        key = (name, hook)
        if key not in self._callers:
            others = [p for n, p in self._pm.list_name_plugin() if n != name]
            sub = self._pm.subset_hook_caller(hook, remove_plugins=others)
            self._callers[key] = sub if sub.get_hookimpls() else None
        return self._callers[key]  # type: ignore[no-any-return]


#: ``_pod_reading`` of a hook that reads the pod without declaring what (compared by
#: identity: a declaration of the key ``*`` is a declaration like any other).
_WHOLE_POD: frozenset[str] = frozenset({"*"})


def _annotations(pod: Pod) -> Mapping[str, Any]:
    """The pod's annotations; empty when it has none or they are not a mapping (as
    ``hami_core.backend.annotations_of`` reads them)."""
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {} if isinstance(meta, Mapping) else {}
    return ann if isinstance(ann, Mapping) else {}


def _pod_view(pod: Pod, reads: frozenset[str] | None) -> Pod:
    """What a ``hami_parse_request`` implementation is given as ``pod``: the pod itself,
    unless it declared the annotations it reads; then only those of them the pod carries
    (so that its answer follows from what the memo's key holds)."""
    if reads is None or reads is _WHOLE_POD:
        return pod
    ann = _annotations(pod)
    return {"metadata": {"annotations": {k: ann[k] for k in sorted(reads) if k in ann}}}


def _json_or_none(container: Container) -> str | None:
    """The container as JSON text (the memo's key: same content, same text, as the API
    server writes one Deployment's replicas), or None when it is not JSON."""
    try:
        return json.dumps(container, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _checked_fit(
    name: str, hook: str, request: DeviceRequest, usage: Sequence[DeviceUsage], result: Any
) -> FitResult:
    """``result`` when it is a ``FitResult`` placing ``request.count`` distinct devices
    of ``usage`` (or none; a device may repeat only as distinct MIG instances of it,
    each with its ``mig`` slot), else a ``BackendError`` naming the backend."""
    if result is None:
        raise BackendError(name, f"{hook} returned None for its own vendor {request.vendor!r}")
    if not isinstance(result, FitResult):
        raise BackendError(name, f"{hook} returned {type(result).__name__}, expected FitResult")
    if result.fits:
        uuids = [d.uuid for d in result.devices]
        known = {u.device.uuid for u in usage}
        # a device twice only as distinct MIG instances of it (N instances of a GPU in
        # mig mode, several per GPU allowed, as HAMi 2.10's Fit takes them)
        slots = {(d.uuid, d.mig) for d in result.devices}
        repeated = {u for u in uuids if uuids.count(u) > 1}
        distinct = len(slots) == len(uuids) and all(
            d.mig is not None for d in result.devices if d.uuid in repeated
        )
        if len(uuids) != request.count or not distinct or not set(uuids) <= known:
            raise BackendError(
                name,
                f"{hook} placed {uuids} for a request of {request.count} distinct devices "
                f"among {sorted(known)}",
            )
    return result


def _load(ep: EntryPoint) -> object:
    try:
        return ep.load()
    except Exception as exc:
        raise BackendError(ep.name, f"cannot load entry point {ep.value!r}: {exc}") from exc


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _configured(dtype: DeviceTypeInfo, section: VendorConfig, *, single: bool) -> DeviceTypeInfo:
    """``dtype`` under its backend's section: the memory unit its ``memory_unit_option``
    sets (at least 1; the option was checked by the backend's ``hami_check_config``) and,
    for a backend of one device type (``single``), the section's resource names
    (``resourceCountName``, ``resourceMemoryName``, ``resourceMemoryPercentageName``,
    ``resourceCoreName``: HAMi's device-config keys). Those are the names its requests
    and device plugin use, so the quotas, the webhook's checks and ``hami simulate``
    read the same ones. A backend of several types names them per type through
    ``DeviceTypeInfo.configured_resources`` (HAMi's ``vnpus``); a name the vendor does
    not have ("") stays ""."""
    r = dtype.resources
    if dtype.configured_resources is not None:
        named = dtype.configured_resources(section)
        r = attrs.evolve(
            r,
            count=named.count or r.count,
            memory=(named.memory or r.memory) if r.memory else "",
            memory_pct=(named.memory_pct or r.memory_pct) if r.memory_pct else "",
            cores=(named.cores or r.cores) if r.cores else "",
        )
    elif single:
        r = attrs.evolve(
            r,
            count=section.resource_count_name or r.count,
            memory=(section.resource_memory_name or r.memory) if r.memory else "",
            memory_pct=(section.resource_memory_pct_name or r.memory_pct) if r.memory_pct else "",
            cores=(section.resource_cores_name or r.cores) if r.cores else "",
        )
    if dtype.memory_unit_option:
        try:
            factor = max(1, int(section.options.get(dtype.memory_unit_option, 1)))
        except (TypeError, ValueError):
            factor = 1
        r = attrs.evolve(r, memory_unit_mib=r.memory_unit_mib * factor)
    return dtype if r == dtype.resources else attrs.evolve(dtype, resources=r)
