"""``BackendConformance``: the contract every backend must keep, as pytest tests."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import attrs
import pytest

from hami_core.model import (
    CORES_UNITS,
    BackendInfo,
    ContainerAllocation,
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceTypeInfo,
    DeviceUsage,
    FitResult,
    MutateResult,
    NodeInfo,
    NodePolicy,
)
from hami_core.plugin import BackendManager
from hami_core.scheduling.nodeclass import relabel
from hami_core.scheduling.scoring import vendor_score
from hami_core.webhook.mutation import apply_mutation, apply_patch
from hami_core.webhook.trust import is_shim_variable

from .hostwrites import host_writes

FOREIGN_VENDOR = "ConformanceForeignVendor"
FOREIGN_RESOURCE = "conformance.example.com/foreign-device"


@pytest.mark.hami_conformance
class BackendConformance:
    """Base class of a backend's conformance tests. Set ``backend_name``.

    Class attributes:
        backend_name: the backend's name (its entry-point name).
        plugin: the plugin object to test; None = load it from its entry point.
        device_memory_mib: memory of each sample device.

    Methods a backend may override: ``device_type``, ``sample_devices``,
    ``sample_container`` and ``expected_count``.
    """

    backend_name: ClassVar[str] = ""
    plugin: ClassVar[object | None] = None
    device_memory_mib: ClassVar[int] = 16384

    # -- what a backend may override ------------------------------------------------

    @pytest.fixture
    def manager(self) -> BackendManager:
        """The backend alone in a manager."""
        assert self.backend_name, "set backend_name on the conformance test class"
        if self.plugin is not None:
            return BackendManager.from_plugins({self.backend_name: self.plugin})
        full = BackendManager.from_entry_points(disabled=[])
        names = [r.name for r in full.backends]
        assert self.backend_name in names, f"{self.backend_name!r} not installed: {names}"
        return BackendManager.from_entry_points(
            disabled=[n for n in names if n != self.backend_name]
        )

    def device_type(self, manager: BackendManager) -> DeviceTypeInfo:
        """The vendor key the kit exercises (the backend's first)."""
        return manager.infos[self.backend_name].device_types[0]

    def sample_devices(self, dtype: DeviceTypeInfo) -> tuple[DeviceInfo, ...]:
        """Two healthy, empty devices of the vendor."""
        return tuple(
            DeviceInfo(
                uuid=f"{dtype.vendor}-conformance-{i}",
                vendor=dtype.vendor,
                model=f"{dtype.vendor} conformance",
                index=i,
                split_count=10,
                memory_mib=self.device_memory_mib,
                cores_pct=100,
                numa=0,
                healthy=True,
            )
            for i in range(2)
        )

    def expected_count(self, requested: int) -> int:
        """The device count a request of ``requested`` devices parses to.

        The identity by default. Override where the vendor rounds counts, e.g. Ascend 910C,
        where a request of 1 takes a module of 2 chips (``return 2 * ceil(requested / 2)``).
        """
        return requested

    def sample_container(
        self, dtype: DeviceTypeInfo, *, count: int, memory_mib: int
    ) -> dict[str, Any]:
        """A container asking ``count`` devices with ``memory_mib`` each."""
        res = dtype.resources
        limits: dict[str, Any] = {res.count: str(count)}
        if res.memory:
            limits[res.memory] = str(max(1, memory_mib // res.memory_unit_mib))
        return {"name": "main", "image": "busybox", "resources": {"limits": limits}}

    # -- helpers --------------------------------------------------------------------

    def _pod(self, *containers: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "conformance", "namespace": "default", "uid": "uid-conformance"},
            "spec": {"containers": list(containers)},
        }

    def _usage(self, devices: tuple[DeviceInfo, ...]) -> tuple[DeviceUsage, ...]:
        return tuple(DeviceUsage(device=d) for d in devices)

    def _request(self, manager: BackendManager, container: dict[str, Any]) -> DeviceRequest:
        reqs = manager.parse_requests(self._pod(container), container, init=False)
        assert len(reqs) == 1, f"expected one request from the sample container, got {reqs}"
        return reqs[0]

    # -- the contract ---------------------------------------------------------------

    def test_info(self, manager: BackendManager) -> None:
        info = manager.infos[self.backend_name]
        assert isinstance(info, BackendInfo)
        assert info.name == self.backend_name
        for t in info.device_types:
            assert t.vendor and "," not in t.vendor and ":" not in t.vendor and ";" not in t.vendor
            assert "/" in t.resources.count, "the count resource must be a qualified name"
            for name in t.resources.all():
                assert "/" in name, f"resource {name!r} must be a qualified extended-resource name"
            for key in (
                t.register_annotation,
                t.handshake_annotation,
                t.to_allocate_annotation,
                t.allocated_annotation,
            ):
                assert key.startswith("hami.io/"), f"annotation key {key!r} outside hami.io/"
            assert t.resources.memory_unit_mib >= 1
            if t.configured_resources is not None:
                # a name for every resource the type declares, and those are in force
                named = t.configured_resources(manager.vendor_config(self.backend_name))
                in_force = manager.device_type(t.vendor).resources
                assert len(named.all()) == len(t.resources.all()), (
                    f"{t.vendor}: configured_resources gives {named.all()} for the declared "
                    f"{t.resources.all()}"
                )
                assert in_force.all() == named.all(), (in_force.all(), named.all())
            for unit in (t.cores_unit, t.resource_cores_unit):
                assert CORES_UNITS.get(unit.name) == unit, (
                    f"{t.vendor}: cores unit {unit.name!r} is not one of hami_core.model's "
                    f"CORES_UNITS ({', '.join(CORES_UNITS)}); declare one of them, or add "
                    "the vendor's unit there"
                )

    def test_ignores_other_vendors(self, manager: BackendManager) -> None:
        """The broadcast hook (parse) answers None for another vendor's container. Mutate,
        fit, score, allocate and bind annotations need no such check: the manager calls
        only the backend that owns the parsed request or the vendor key."""
        name = self.backend_name
        config = manager.vendor_config(name)
        foreign = {"name": "other", "resources": {"limits": {FOREIGN_RESOURCE: "1"}}}
        pod = self._pod(foreign)
        assert (
            manager.call_backend(
                name, "hami_parse_request", pod=pod, container=foreign, init=False, config=config
            )
            is None
        )

    def test_parse_request(self, manager: BackendManager) -> None:
        dtype = self.device_type(manager)
        req = self._request(
            manager, self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        )
        assert req.vendor == dtype.vendor
        assert req.count == self.expected_count(1)
        assert 0 <= req.cores_pct <= 100

    @pytest.mark.parametrize("policy", list(DevicePolicy))
    def test_fit_places_within_capacity(
        self, manager: BackendManager, policy: DevicePolicy
    ) -> None:
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        req = self._request(manager, container)
        node = NodeInfo(name="conformance-node", devices=devices)
        result = manager.fit(
            req, node, self._usage(devices), pod=self._pod(container), policy=policy
        )
        assert isinstance(result, FitResult)
        assert result.fits, f"a small request must fit an empty node: {result}"
        by_uuid = {d.uuid: d for d in devices}
        assert len(result.devices) == req.count
        for d in result.devices:
            assert d.vendor == dtype.vendor
            if by_uuid[d.uuid].memory_mib:
                assert 0 < d.memory_mib <= by_uuid[d.uuid].memory_mib
            else:  # a device without memory accounting (AWS Neuron) hands out none
                assert d.memory_mib == 0
            assert 0 <= d.cores_pct <= by_uuid[d.uuid].cores_pct
        again = manager.fit(
            req, node, self._usage(devices), pod=self._pod(container), policy=policy
        )
        assert again == result, "the same input must give the same placement"

    def test_no_fit_explains_every_device(self, manager: BackendManager) -> None:
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        req = self._request(manager, container)
        full = tuple(
            DeviceUsage(
                device=d,
                used_count=d.split_count,
                used_memory_mib=d.memory_mib,
                used_cores_pct=d.cores_pct,
            )
            for d in devices
        )
        result = manager.fit(
            req,
            NodeInfo(name="full", devices=devices),
            full,
            pod=self._pod(container),
            policy=DevicePolicy.SPREAD,
        )
        assert not result.fits
        assert not result.devices
        assert set(result.device_reasons) == {d.uuid for d in devices}, result
        too_many = manager.fit(
            DeviceRequest(vendor=req.vendor, count=len(devices) + 1, memory_pct=100, cores_pct=0),
            NodeInfo(name="small", devices=devices),
            self._usage(devices),
            pod=self._pod(container),
            policy=DevicePolicy.SPREAD,
        )
        assert not too_many.fits and too_many.node_reason is not None

    def test_fit_depends_on_the_pod_only_through_its_annotations(
        self, manager: BackendManager
    ) -> None:
        """The scheduler reuses a node's fit for another pod of the same requests,
        annotations and policy until the node's usage changes (``hami_fit``'s contract):
        another name, namespace, uid or labels must not change the answer."""
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        req = self._request(manager, container)
        node = NodeInfo(name="conformance-node", devices=devices)
        first = manager.fit(
            req, node, self._usage(devices), pod=self._pod(container), policy=DevicePolicy.BINPACK
        )
        other = self._pod(container)
        other["metadata"].update(
            name="conformance-other", namespace="elsewhere", uid="uid-other", labels={"a": "b"}
        )
        second = manager.fit(
            req, node, self._usage(devices), pod=other, policy=DevicePolicy.BINPACK
        )
        assert second == first

    def test_fit_keeps_the_prefilter_rules(self, manager: BackendManager) -> None:
        """The scheduler rejects a node without running ``hami_fit`` when it lacks
        ``count`` healthy, uncordoned devices with a free sharer slot and the request's
        memory free (PROTOCOL.md §1-2): a backend must never place on such a device."""
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        req = self._request(manager, container)
        node = NodeInfo(name="conformance-node", devices=devices)
        states = {
            "every sharer slot taken": tuple(
                DeviceUsage(device=d, used_count=d.split_count) for d in devices
            ),
            "unhealthy": tuple(DeviceUsage(device=attrs.evolve(d, healthy=False)) for d in devices),
            "cordoned": tuple(DeviceUsage(device=d, cordoned=True) for d in devices),
        }
        if req.memory_mib and all(d.memory_mib for d in devices):
            states["memory short of the request"] = tuple(
                DeviceUsage(device=d, used_memory_mib=d.memory_mib - req.memory_mib + 1)
                for d in devices
            )
        for what, usage in states.items():
            sick = NodeInfo(name="conformance-node", devices=tuple(u.device for u in usage))
            result = manager.fit(
                req,
                sick if what == "unhealthy" else node,
                usage,
                pod=self._pod(container),
                policy=DevicePolicy.SPREAD,
            )
            assert not result.fits, f"placed on devices with {what}: {result}"

    @pytest.mark.parametrize("policy", list(DevicePolicy))
    def test_batch_fit_answers_as_fit_per_node(
        self, manager: BackendManager, policy: DevicePolicy
    ) -> None:
        """``hami_fit_nodes`` is optional (the core falls back to ``hami_fit`` per
        node); whichever answers, ``BackendManager.fit_nodes`` must give for each node
        exactly what ``hami_fit`` gives for it alone: here over an empty node, a half
        used one, a full one and one with a device unhealthy."""
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        req = self._request(manager, container)
        pod = self._pod(container)
        states = [
            tuple(DeviceUsage(device=d) for d in devices),
            tuple(
                DeviceUsage(device=d, used_count=1, used_memory_mib=d.memory_mib // 2)
                if i % 2 == 0
                else DeviceUsage(device=d)
                for i, d in enumerate(devices)
            ),
            tuple(DeviceUsage(device=d, used_count=d.split_count) for d in devices),
            tuple(
                DeviceUsage(device=attrs.evolve(d, healthy=False))
                if i == 0
                else DeviceUsage(device=d)
                for i, d in enumerate(devices)
            ),
        ]
        nodes = [
            (
                NodeInfo(name=f"conformance-node-{i}", devices=tuple(u.device for u in usage)),
                usage,
                (),
            )
            for i, usage in enumerate(states)
        ]
        batch = manager.fit_nodes(req, nodes, pod=pod, policy=policy)
        one_by_one = [manager.fit(req, n, u, pod=pod, policy=policy) for n, u, _ in nodes]
        assert batch == one_by_one

    @pytest.mark.parametrize("policy", list(DevicePolicy))
    def test_fit_by_node_class_answers_renamed_nodes_renamed(
        self, manager: BackendManager, policy: DevicePolicy
    ) -> None:
        """A backend declaring ``BackendInfo.fit_by_node_class`` gets one fit per class
        of nodes identical but for their names and device UUIDs, relabelled for the
        others (``hami_core.scheduling.nodeclass``): so ``hami_fit``,
        ``hami_fit_nodes`` and ``hami_score`` must answer a consistently renamed node
        (same UUID sort order) with the same answer renamed, here over an empty, a half
        used and a full node. Skipped for a backend that does not declare it (every
        node is then fitted on its own)."""
        if not manager.infos[self.backend_name].fit_by_node_class:
            # "not applicable here": a skip hami's own CI allows (tests/skips.py)
            pytest.skip(f"not applicable here: {self.backend_name} declares no fit_by_node_class")
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        renamed = tuple(
            attrs.evolve(d, uuid=f"{d.uuid}-renamed-{self.backend_name}") for d in devices
        )
        labels = {d.uuid: r.uuid for d, r in zip(devices, renamed, strict=True)}
        labels["conformance-node"] = "conformance-renamed"
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        req = self._request(manager, container)
        pod = self._pod(container)

        def states(devs: tuple[DeviceInfo, ...]) -> list[tuple[DeviceUsage, ...]]:
            return [
                tuple(DeviceUsage(device=d) for d in devs),
                tuple(
                    DeviceUsage(device=d, used_count=1, used_memory_mib=d.memory_mib // 2)
                    if i % 2 == 0
                    else DeviceUsage(device=d)
                    for i, d in enumerate(devs)
                ),
                tuple(DeviceUsage(device=d, used_count=d.split_count) for d in devs),
            ]

        node = NodeInfo(name="conformance-node", devices=devices)
        other = NodeInfo(name="conformance-renamed", devices=renamed)
        for usage, usage_renamed in zip(states(devices), states(renamed), strict=True):
            first = manager.fit(req, node, usage, pod=pod, policy=policy)
            second = manager.fit(req, other, usage_renamed, pod=pod, policy=policy)
            assert second == relabel(first, labels), (first, second)
            (batch,) = manager.fit_nodes(req, [(other, usage_renamed, ())], pod=pod, policy=policy)
            assert batch == second
            if first.fits:
                for node_policy in NodePolicy:
                    a = vendor_score(
                        manager, dtype.vendor, node, usage, first.devices, policy=node_policy
                    )
                    b = vendor_score(
                        manager,
                        dtype.vendor,
                        other,
                        usage_renamed,
                        second.devices,
                        policy=node_policy,
                    )
                    assert a == b

    @pytest.mark.parametrize("policy", list(NodePolicy))
    def test_score_follows_the_node_policy(
        self, manager: BackendManager, policy: NodePolicy
    ) -> None:
        """The backend's score (or the core's default from its fit rules) is in 0..100
        and follows the policy: binpack prefers the node whose device is already half
        used, spread the empty one."""
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        slice_ = (
            ContainerDevice(
                uuid=devices[0].uuid,
                vendor=dtype.vendor,
                memory_mib=self.device_memory_mib // 8,
                cores_pct=10,
            ),
        )
        node = NodeInfo(name="n", devices=devices)
        empty = self._usage(devices)
        half = (
            DeviceUsage(
                device=devices[0],
                used_count=1,
                used_memory_mib=devices[0].memory_mib // 2,
                used_cores_pct=devices[0].cores_pct // 2,
            ),
            *empty[1:],
        )
        on_empty = vendor_score(manager, dtype.vendor, node, empty, slice_, policy=policy)
        on_half = vendor_score(manager, dtype.vendor, node, half, slice_, policy=policy)
        assert 0 <= on_empty <= 100 and 0 <= on_half <= 100
        if policy is NodePolicy.BINPACK:
            assert on_half > on_empty
        else:
            assert on_empty > on_half

    def test_allocate(self, manager: BackendManager) -> None:
        dtype = self.device_type(manager)
        devices = self.sample_devices(dtype)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        slice_ = (
            ContainerDevice(
                uuid=devices[0].uuid,
                vendor=dtype.vendor,
                memory_mib=self.device_memory_mib // 8,
                cores_pct=10,
            ),
        )
        try:
            # as the device plugin calls it: with the node's discovered devices; node-local
            # state goes through the ``state`` the core hands in, never a host file
            with host_writes() as written:
                res = manager.allocate(
                    dtype.vendor, self._pod(container), container, slice_, node_devices=devices
                )
        except Exception as exc:  # a backend without hami_allocate is reported, not crashed on
            pytest.fail(f"hami_allocate failed: {exc}")
        assert written == [], (
            f"hami_allocate wrote on the host: {written} (keep records in its `state` "
            "argument, files a container mounts in ContainerAllocation.files)"
        )
        assert isinstance(res, ContainerAllocation)
        for key, value in res.envs.items():
            assert isinstance(key, str) and isinstance(value, str), (key, value)
        for m in res.mounts:
            assert m.container_path.startswith("/") and m.host_path.startswith("/")
        # the webhook denies a tenant's own value of each (its env wins in kubelet)
        undeclared = sorted(k for k in res.envs if not is_shim_variable(k, dtype.allocate_env))
        assert not undeclared, (
            f"hami_allocate sets {undeclared}, which DeviceTypeInfo.allocate_env does not "
            "name: a tenant could set them in its own env"
        )

    def test_mutate_applies_and_is_stable(self, manager: BackendManager) -> None:
        """The webhook writes the backend's result: the container still parses to the
        same request, other containers are untouched, and mutating the mutated pod
        again (the webhook may be re-invoked) changes nothing."""
        dtype = self.device_type(manager)
        container = self.sample_container(dtype, count=1, memory_mib=self.device_memory_mib // 8)
        pod = self._pod({"name": "sidecar", "image": "busybox"}, container)
        before = self._request(manager, container)
        results = manager.mutate(
            pod, container, container_path="/spec/containers/1", requests=[before]
        )
        assert len(results) == 1, results
        name, res = results[0]
        assert name == self.backend_name
        assert isinstance(res, MutateResult)
        assert res.denial is None, res.denial
        patched = copy.deepcopy(pod)
        ops = apply_mutation(patched, patched["spec"]["containers"][1], "/spec/containers/1", res)
        # the operations the webhook answers with reproduce the mutated pod
        assert apply_patch(copy.deepcopy(pod), ops) == patched
        after_container = patched["spec"]["containers"][1]
        assert self._request(manager, after_container) == before, "mutation changed the request"
        assert patched["spec"]["containers"][0] == pod["spec"]["containers"][0]
        again = manager.mutate(
            patched, after_container, container_path="/spec/containers/1", requests=[before]
        )
        twice = copy.deepcopy(patched)
        assert (
            apply_mutation(twice, twice["spec"]["containers"][1], "/spec/containers/1", again[0][1])
            == []
        )
        assert twice == patched
