"""The BackendManager facade: loading, validation, dispatch, contract checks."""

import types

import pytest

from hami_core.errors import BackendError, InvalidInputError
from hami_core.model import DevicePolicy, DeviceRequest, DeviceUsage, FitResult, NodeInfo
from hami_core.plugin import BackendManager, hookimpl
from tests.toy_backend import TOY_DEVICE, ToyBackend


def toy(**overrides):
    plugin = ToyBackend()
    for name, fn in overrides.items():
        setattr(plugin, name, hookimpl(fn))
    return plugin


REQ = DeviceRequest(vendor="TOY", count=1, memory_mib=10)
NODE = NodeInfo(name="n", devices=(TOY_DEVICE,))


def test_entry_points_and_disable(monkeypatch):
    manager = BackendManager.from_entry_points()
    assert "nvidia" in [b.name for b in manager.backends]
    record = next(b for b in manager.backends if b.name == "nvidia")
    assert record.version and "hami_fit" in record.hooks
    names = [b.name for b in manager.backends]
    monkeypatch.setenv("HAMI_DISABLED_BACKENDS", "nvidia, other")
    assert "nvidia" not in [b.name for b in BackendManager.from_entry_points().backends]
    monkeypatch.setenv("HAMI_DISABLED_BACKENDS", ",".join(names))
    assert BackendManager.from_entry_points().backends == ()


def test_dispatch_by_vendor():
    manager = BackendManager.from_plugins({"toy": toy()})
    result = manager.fit(
        REQ, NODE, (DeviceUsage(device=TOY_DEVICE),), pod={}, policy=DevicePolicy.SPREAD
    )
    assert result.fits and result.devices[0].uuid == TOY_DEVICE.uuid
    with pytest.raises(KeyError, match="no installed backend serves vendor 'NOPE'"):
        manager.fit(
            DeviceRequest(vendor="NOPE", count=1, memory_mib=1),
            NODE,
            (),
            pod={},
            policy=DevicePolicy.SPREAD,
        )


def test_wrong_return_type_names_the_backend():
    manager = BackendManager.from_plugins({"toy": toy(hami_fit=lambda request: "fits!")})
    with pytest.raises(
        BackendError, match=r"backend 'toy': hami_fit returned str, expected FitResult"
    ):
        manager.fit(
            REQ, NODE, (DeviceUsage(device=TOY_DEVICE),), pod={}, policy=DevicePolicy.SPREAD
        )


def test_placement_outside_the_node_is_a_contract_break():
    bad = FitResult(
        devices=(
            __import__("hami_core.model", fromlist=["ContainerDevice"]).ContainerDevice(
                uuid="GHOST", vendor="TOY", memory_mib=1, cores_pct=0
            ),
        )
    )
    manager = BackendManager.from_plugins({"toy": toy(hami_fit=lambda request: bad)})
    with pytest.raises(BackendError, match="backend 'toy': hami_fit placed"):
        manager.fit(
            REQ, NODE, (DeviceUsage(device=TOY_DEVICE),), pod={}, policy=DevicePolicy.SPREAD
        )


def test_exception_in_hook_names_the_backend_but_invalid_input_passes():
    def boom(container):
        raise KeyError("resources")

    manager = BackendManager.from_plugins({"toy": toy(hami_parse_request=boom)})
    with pytest.raises(BackendError, match=r"backend 'toy': hami_parse_request raised KeyError"):
        manager.parse_requests({}, {}, init=False)

    def invalid(container):
        raise InvalidInputError("container 'x': bad")

    manager = BackendManager.from_plugins({"toy": toy(hami_parse_request=invalid)})
    with pytest.raises(InvalidInputError, match="container 'x': bad"):
        manager.parse_requests({}, {}, init=False)


def test_misspelt_hook_fails_at_load_marked_or_not():
    plugin = types.SimpleNamespace(
        hami_backend_info=ToyBackend.hami_backend_info, hami_fitt=lambda request: None
    )
    with pytest.raises(BackendError, match=r"backend 'toy': unknown hook.*hami_fitt"):
        BackendManager.from_plugins({"toy": plugin})
    marked = types.SimpleNamespace(
        hami_backend_info=ToyBackend.hami_backend_info, hami_scor=hookimpl(lambda: 1)
    )
    with pytest.raises(BackendError, match="hami_scor"):
        BackendManager.from_plugins({"toy": marked})


def test_unknown_argument_fails_at_load():
    plugin = toy(hami_fit=lambda request, gpus: None)
    with pytest.raises(BackendError, match=r"(?s)backend 'toy': invalid hook implementation.*gpus"):
        BackendManager.from_plugins({"toy": plugin})


def test_backend_info_is_required_and_checked():
    with pytest.raises(BackendError, match="hami_backend_info is required"):
        BackendManager.from_plugins({"toy": types.SimpleNamespace()})
    with pytest.raises(BackendError, match="names itself 'toy'"):
        BackendManager.from_plugins({"other": toy()})
    with pytest.raises(BackendError, match="already served"):
        BackendManager.from_plugins(
            {"toy": toy(), "toy2": toy(hami_backend_info=lambda: ToyBackend.info("toy2"))}
        )


def constant(value):
    return lambda: value


def test_score_out_of_range_and_bool_rejected():
    for value in (101, -1):
        manager = BackendManager.from_plugins({"toy": toy(hami_score=constant(value))})
        with pytest.raises(BackendError, match="outside 0..100"):
            manager.score(
                "TOY",
                NODE,
                (),
                (),
                policy=__import__("hami_core.model", fromlist=["NodePolicy"]).NodePolicy.BINPACK,
            )
    manager = BackendManager.from_plugins({"toy": toy(hami_score=lambda: True)})
    with pytest.raises(BackendError, match="returned bool"):
        manager.score(
            "TOY",
            NODE,
            (),
            (),
            policy=__import__("hami_core.model", fromlist=["NodePolicy"]).NodePolicy.BINPACK,
        )


def test_parse_request_for_a_foreign_vendor_is_refused():
    manager = BackendManager.from_plugins(
        {
            "toy": toy(
                hami_parse_request=lambda: DeviceRequest(vendor="NVIDIA", count=1, memory_mib=1)
            )
        }
    )
    with pytest.raises(BackendError, match="returned vendor 'NVIDIA', not its own"):
        manager.parse_requests({}, {}, init=False)


def test_failing_entry_point_names_it(monkeypatch):
    import hami_core.plugin.manager as m

    class EP:
        name = "broken"
        value = "nowhere.plugin"
        dist = None

        def load(self):
            raise ImportError("No module named 'nowhere'")

    monkeypatch.setattr(m, "entry_points", lambda group: [EP()])
    with pytest.raises(
        BackendError, match=r"backend 'broken': cannot load entry point 'nowhere.plugin'"
    ):
        BackendManager.from_entry_points(disabled=[])


def test_hami_bind_annotations_is_checked():
    node = NODE
    ok = BackendManager.from_plugins(
        {"toy": toy(hami_bind_annotations=lambda vendor: {"toy.example.com/x": vendor})}
    )
    assert ok.bind_annotations("TOY", {}, node, ()) == {"toy.example.com/x": "TOY"}
    assert BackendManager.from_plugins({"toy": toy()}).bind_annotations("TOY", {}, node, ()) == {}
    bad_type = BackendManager.from_plugins({"toy": toy(hami_bind_annotations=lambda: {"k": 1})})
    with pytest.raises(BackendError, match="not str -> str"):
        bad_type.bind_annotations("TOY", {}, node, ())
    clash = BackendManager.from_plugins(
        {"toy": toy(hami_bind_annotations=lambda: {"hami.io/bind-phase": "success"})}
    )
    with pytest.raises(BackendError, match="may not write"):
        clash.bind_annotations("TOY", {}, node, ())


def test_allocate_passes_the_node_devices():
    from hami_core.model import ContainerAllocation

    seen = {}

    def allocate(devices, node_devices):
        seen["node"] = node_devices
        return ContainerAllocation(envs={"N": str(len(node_devices))})

    manager = BackendManager.from_plugins({"toy": toy(hami_allocate=allocate)})
    assert manager.allocate("TOY", {}, {}, (), node_devices=[TOY_DEVICE]).envs == {"N": "1"}
    assert seen["node"] == (TOY_DEVICE,)
    assert manager.allocate("TOY", {}, {}, ()).envs == {"N": "0"}


def test_disabling_an_unknown_backend_is_warned(caplog):
    BackendManager.from_entry_points(disabled=["nvidai"])
    assert "HAMI_DISABLED_BACKENDS names backends that are not installed: nvidai" in caplog.text


def test_hami_node_devices_is_asked_first_and_checked():
    """A backend reading its devices from the Node object (HAMi's capacity-based
    vendors) is asked before the register annotation; a malformed value marks only that
    vendor unregistered; a wrong answer names the backend."""
    import datetime as dt

    from hami_core.errors import AnnotationError
    from hami_core.facts.nodes import read_node
    from hami_core.model import DeviceInfo

    from_capacity = DeviceInfo(uuid="cap-0", vendor="TOY", split_count=1, memory_mib=5)

    def devices(node):
        cap = (node.get("status") or {}).get("capacity") or {}
        if "toy.example.com/broken" in cap:
            raise AnnotationError("capacity toy.example.com/broken is not a number")
        return [from_capacity] if "toy.example.com/cards" in cap else None

    manager = BackendManager.from_plugins({"toy": toy(hami_node_devices=devices)})
    types_ = manager.device_types()
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    node = {"metadata": {"name": "n"}, "status": {"capacity": {"toy.example.com/cards": "1"}}}
    assert read_node(node, types_, now=now, reader=manager.node_devices).devices == (from_capacity,)
    broken = {"metadata": {"name": "n"}, "status": {"capacity": {"toy.example.com/broken": "x"}}}
    info = read_node(broken, types_, now=now, reader=manager.node_devices)
    assert info.devices == () and "not a number" in info.unregistered["TOY"]
    # None: the register annotation is decoded as for any vendor
    plain = {"metadata": {"name": "n", "annotations": {}}}
    assert read_node(plain, types_, now=now, reader=manager.node_devices).devices == ()
    assert BackendManager.from_plugins({"toy": toy()}).node_devices("TOY", node) is None
    wrong = BackendManager.from_plugins(
        {"toy": toy(hami_node_devices=lambda: [DeviceInfo(uuid="x", vendor="OTHER")])}
    )
    with pytest.raises(BackendError, match="not a DeviceInfo of 'TOY'"):
        wrong.node_devices("TOY", node)


# -- the optional batch fit ------------------------------------------------------------

BATCH = [
    (NODE, (DeviceUsage(device=TOY_DEVICE),), ()),
    (NODE, (DeviceUsage(device=TOY_DEVICE, used_count=TOY_DEVICE.split_count),), ()),
]


def test_a_backend_without_the_batch_hook_is_fitted_node_by_node():
    calls = []
    inner = ToyBackend()

    def hami_fit(request, node, usage, pod, policy):
        calls.append(node.name)
        return inner.hami_fit(request=request, usage=usage)

    manager = BackendManager.from_plugins({"toy": toy(hami_fit=hami_fit)})
    results = manager.fit_nodes(REQ, BATCH, pod={}, policy=DevicePolicy.SPREAD)
    assert [r.fits for r in results] == [True, False] and calls == ["n", "n"]


def test_the_batch_hook_is_called_once_and_checked_like_fit():
    calls = []
    good = ToyBackend().hami_fit

    def batch(request, nodes, pod, policy):
        calls.append(len(nodes))
        return [good(request=request, usage=u) for _, u, _ in nodes]

    manager = BackendManager.from_plugins({"toy": toy(hami_fit_nodes=batch)})
    results = manager.fit_nodes(REQ, BATCH, pod={}, policy=DevicePolicy.SPREAD)
    assert [r.fits for r in results] == [True, False] and calls == [2]

    short = BackendManager.from_plugins({"toy": toy(hami_fit_nodes=lambda nodes: [])})
    with pytest.raises(BackendError, match="hami_fit_nodes answered 0 results for 2 nodes"):
        short.fit_nodes(REQ, BATCH, pod={}, policy=DevicePolicy.SPREAD)
    ghost = FitResult(
        devices=(
            __import__("hami_core.model", fromlist=["ContainerDevice"]).ContainerDevice(
                uuid="GHOST", vendor="TOY", memory_mib=1, cores_pct=0
            ),
        )
    )
    liar = BackendManager.from_plugins(
        {"toy": toy(hami_fit_nodes=lambda nodes: [ghost] * len(nodes))}
    )
    with pytest.raises(BackendError, match="backend 'toy': hami_fit_nodes placed"):
        liar.fit_nodes(REQ, BATCH, pod={}, policy=DevicePolicy.SPREAD)
