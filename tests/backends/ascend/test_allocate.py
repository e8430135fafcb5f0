"""What kubelet adds to Ascend containers (Ascend Docker Runtime env, HAMi soft slicing)."""

import attrs
import pytest
from hami_ascend import discover, plugin
from hami_ascend.allocate import DRIVER_PATHS, allocate
from hami_ascend.models import settings
from hami_ascend.names import DEVICE_TYPES

from hami_core.errors import InvalidInputError
from hami_core.model import ContainerDevice
from hami_core.testing import section
from hami_core.webhook.trust import is_shim_variable, mount_denial

from .support import FakeNpuSmi

DEFAULT = section(plugin)
UUID0 = "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
UUID3 = "901422D4-02103514-1711E613-6DA7040A-00102001"
POD = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-1"}}
CONTAINER = {"name": "main"}


def dev(uuid, mib, cores=0, vendor="Ascend910B3"):
    return ContainerDevice(uuid=uuid, vendor=vendor, memory_mib=mib, cores_pct=cores)


def discovered(layout="910b3"):
    """The node's chips as ``hami_discover`` finds them (with their physical ids)."""
    found = discover.discover(settings(DEFAULT), FakeNpuSmi(layout))
    assert found is not None
    return found


def test_a_slice_gets_its_physical_chip_and_vnpu_template(npu_smi):
    t = discovered()
    res = allocate(POD, CONTAINER, (dev(UUID3, 16384),), DEFAULT, t)
    assert res.envs == {"ASCEND_VISIBLE_DEVICES": "3", "ASCEND_VNPU_SPECS": "vir05_1c_16g"}
    assert res.mounts == ()


def test_a_slice_between_templates_gets_the_template_that_holds_it(npu_smi):
    t = discovered()
    res = allocate(POD, CONTAINER, (dev(UUID0, 20000),), DEFAULT, t)
    assert res.envs["ASCEND_VNPU_SPECS"] == "vir10_3c_32g"


def test_whole_chips_get_no_template(npu_smi):
    t = discovered()
    res = allocate(POD, CONTAINER, (dev(UUID0, 65536, 100), dev(UUID3, 65536, 100)), DEFAULT, t)
    assert res.envs == {"ASCEND_VISIBLE_DEVICES": "0,3"}


def test_910c_chips_use_the_printed_physical_ids(npu_smi):
    t = discovered("a3")
    uuids = [d.uuid for d in t][2:]
    res = allocate(
        POD, CONTAINER, tuple(dev(u, 65536, 100, "Ascend910C") for u in uuids), DEFAULT, t
    )
    assert res.envs == {"ASCEND_VISIBLE_DEVICES": "2,3"}


def test_hami_core_mode_env_and_mounts(npu_smi):
    t = discovered()
    pod = {
        **POD,
        "metadata": {**POD["metadata"], "annotations": {"huawei.com/vnpu-mode": "hami-core"}},
    }
    res = allocate(pod, CONTAINER, (dev(UUID3, 5000, 30),), DEFAULT, t)
    assert res.envs == {
        "ASCEND_VISIBLE_DEVICES": "3",
        "NPU_MEM_QUOTA": "5000",
        "NPU_PRIORITY": "30",
        "NPU_GLOBAL_SHM_PATH": "/hami-shared-region/3_global_registry",
        "NPU_LOCAL_SHM_PATH": "/hami-vnpu-shmem/vnpu_local_shmem",
    }
    mounts = {m.container_path: (m.host_path, m.read_only) for m in res.mounts}
    assert mounts["/hami-vnpu-core"] == ("/usr/local/hami-vnpu-core", True)
    assert mounts["/etc/ld.so.preload"] == ("/usr/local/hami-vnpu-core/ld.so.preload", True)
    assert mounts["/hami-vnpu-shmem"] == ("/usr/local/hami-vnpu-core/containers/uid-1_main", False)
    assert mounts["/usr/local/bin/npu-smi"] == ("/usr/local/bin/npu-smi", True)
    # every one is the webhook's to deny in a tenant's own env (DeviceTypeInfo.allocate_env)
    patterns = DEVICE_TYPES[0].allocate_env
    assert all(is_shim_variable(k, patterns) for k in res.envs), sorted(res.envs)
    # and a tenant's volume may cover none of the limiter's mounts (the driver's files are
    # the tenant's own business)
    roots = DEVICE_TYPES[0].protected_paths
    limiter = [m.container_path for m in res.mounts if m.container_path not in DRIVER_PATHS]
    assert len(limiter) == 4
    assert all(mount_denial({"volumeMounts": [{"mountPath": p}]}, roots) for p in limiter)


def test_a_chip_the_node_does_not_have_is_refused_and_npu_smi_is_not_run(monkeypatch):
    # Allocate reads the node's discovered devices; it never runs npu-smi itself.
    t = discovered()
    calls: list[list[str]] = []
    monkeypatch.setattr(discover, "runner_for", lambda cfg: lambda argv: calls.append(argv))
    with pytest.raises(InvalidInputError, match="not on this node"):
        allocate(POD, CONTAINER, (dev("NOT-HERE", 16384),), DEFAULT, t)
    res = allocate(POD, CONTAINER, (dev(UUID3, 16384),), DEFAULT, t)
    assert res.envs["ASCEND_VISIBLE_DEVICES"] == "3"
    assert calls == []


def test_without_discovery_facts_the_uuid_stands_in():
    # hami simulate hands the inventory's devices (no physical ids) or none at all.
    inventory = [attrs.evolve(d, node_local={}) for d in discovered()]
    for node_devices in ((), inventory):
        res = allocate(POD, CONTAINER, (dev(UUID3, 16384),), DEFAULT, node_devices)
        assert res.envs == {"ASCEND_VISIBLE_DEVICES": UUID3, "ASCEND_VNPU_SPECS": "vir05_1c_16g"}


def test_a_container_without_chips_mounts_nothing():
    assert allocate(POD, CONTAINER, (), DEFAULT, ()).envs == {"ASCEND_VISIBLE_DEVICES": "void"}


def test_runtime_info_annotation_as_hamis_scheduler_writes_it():
    from hami_ascend.models import DEFAULT_MODELS
    from hami_ascend.runtime_info import annotation_key, runtime_info

    b3 = next(m for m in DEFAULT_MODELS if m.vendor == "Ascend910B3")
    devices = ((), (dev("A", 16384),), (dev("B", 65536, 100), dev("C", 65536, 100)))
    assert annotation_key(b3) == "huawei.com/Ascend910B3"
    assert runtime_info(devices, b3, hami_core=False) == (
        '[{"UUID":"A","temp":"vir05_1c_16g","memory":16384},'
        '{"UUID":"B","memory":65536,"core":100},{"UUID":"C","memory":65536,"core":100}]'
    )
    assert runtime_info(((dev("A", 5000, 30),),), b3, hami_core=True) == (
        '[{"UUID":"A","memory":5000,"core":30}]'
    )
