"""hami-nvidia through the real pynvml and the stand-in libnvidia-ml.so.1 (loaded by the
dynamic loader from LD_LIBRARY_PATH, in a child process: the loader reads that
variable only when a process starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.skips import not_applicable

from .conftest import FakeGpus, gpu_uuid

REPO = Path(__file__).resolve().parents[2]
PRELUDE = """
import json, os, sys, time
from hami_nvidia.node import NvidiaNode
from hami_core.protocol.config import VendorConfig
from hami_core.testing import section
from hami_nvidia import plugin
def show(devices):
    return [[d.uuid, d.model, d.index, d.memory_mib, d.numa, d.mode, d.healthy] for d in devices]
def edit(change):
    path = os.environ["FAKE_NVML_CONFIG"]
    doc = json.load(open(path))
    change(doc)
    tmp = path + ".tmp"
    json.dump(doc, open(tmp, "w"))
    os.replace(tmp, path)
out = {}
"""


def run(fake_gpus: FakeGpus, lib: Path | None, body: str) -> dict[str, Any]:
    """Run PRELUDE + body in a child with the stand-in first on LD_LIBRARY_PATH; the
    child fills ``out`` and it is returned."""
    script = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = {**os.environ, **fake_gpus.env(lib if lib is not None else Path("/nonexistent"))}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_discovery_reads_every_field_through_pynvml(fake_gpus: FakeGpus, fake_nvml_dir: Path):
    fake_gpus.doc["devices"][1].update(name="Tesla T4", memory_mib=15360, mig=True)
    fake_gpus.write()

    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        node = NvidiaNode()
        config = section(plugin, memory_scaling=2.0)
        out["before"] = show(node.discover(config))
        node.nvml.create_mig_instance(1, 0, 3, 1)  # a 1g instance on the MIG GPU, as an admin would
        out["devices"] = show(node.discover(config))
        """,
    )

    # A GPU in MIG mode is never shared by the shim: without instances it is not
    # advertised; with one it is a MIG GPU of its physical memory (no scaling).
    assert out["before"] == [[gpu_uuid(0), "NVIDIA A100-PCIE-16GB", 0, 32768, 1, "hami-core", True]]
    assert out["devices"] == [
        [gpu_uuid(0), "NVIDIA A100-PCIE-16GB", 0, 32768, 1, "hami-core", True],
        [gpu_uuid(1), "NVIDIA-Tesla T4", 1, 15360, 0, "mig", True],
    ]


def test_nvml_init_failure_is_a_clear_error(fake_gpus: FakeGpus, fake_nvml_dir: Path):
    fake_gpus.fail(None, "nvmlInit", 9)  # NVML_ERROR_DRIVER_NOT_LOADED

    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        from hami_nvidia.nvml import NvmlError
        try:
            NvidiaNode().discover(section(plugin))
        except NvmlError as exc:
            out["error"] = str(exc)
        """,
    )

    assert out["error"] == (
        "nvmlInit failed: Driver Not Loaded: NVML does not initialise; is the NVIDIA driver "
        "loaded and libnvidia-ml.so.1 the one of that driver? (NVML error 9)"
    )


def test_no_library_means_no_driver(fake_gpus: FakeGpus):
    if any(
        Path(d, "libnvidia-ml.so.1").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64")
    ):
        not_applicable("a real NVIDIA driver library is installed here")

    out = run(fake_gpus, None, 'out["devices"] = NvidiaNode().discover(section(plugin))')

    assert out["devices"] is None


def test_unified_memory_uses_the_configured_value(fake_gpus: FakeGpus, fake_nvml_dir: Path):
    fake_gpus.doc["devices"][0].update(unified=True, name="NVIDIA GB10")
    fake_gpus.write()

    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        from hami_core.errors import ConfigError
        try:
            NvidiaNode().discover(section(plugin))
        except ConfigError as exc:
            out["error"] = str(exc)
        config = section(plugin, options={"unifiedMemoryMiB": 98304})
        out["devices"] = show(NvidiaNode().discover(config))
        """,
    )

    assert "set nvidia.unifiedMemoryMiB" in out["error"]
    assert out["devices"][0][3] == 98304


def test_xid_events_mark_gpus_unhealthy_and_they_recover(fake_gpus: FakeGpus, fake_nvml_dir: Path):
    fake_gpus.event(1, 31)  # page fault: the application's problem
    fake_gpus.event(1, 79)  # fallen off the bus

    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        config = section(plugin, options={"healthRecoverySeconds": 1})
        node = NvidiaNode()
        node.discover(config)
        out["first"] = node.watch_health(config, 2.0)
        out["second"] = node.watch_health(config, 2.0)
        out["during"] = [d.healthy for d in node.discover(config)]
        out["quiet"] = node.watch_health(config, 0.2)
        time.sleep(1.0)
        out["recovered"] = node.watch_health(config, 0.2)
        out["after"] = [d.healthy for d in node.discover(config)]
        """,
    )

    assert out["first"] == []
    assert out["second"] == [gpu_uuid(1)]
    assert out["during"] == [True, False]
    assert out["quiet"] == []
    assert out["recovered"] == [gpu_uuid(1)]
    assert out["after"] == [True, True]


def test_a_lost_gpu_stays_listed_unhealthy_until_it_answers(
    fake_gpus: FakeGpus, fake_nvml_dir: Path
):
    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        config = section(plugin, options={"healthRecoverySeconds": 1})
        node = NvidiaNode()
        node.discover(config)
        edit(lambda d: d["devices"][0].update(fail={"nvmlDeviceGetMemoryInfo": 15}))
        out["lost"] = show(node.discover(config))
        time.sleep(1.1)
        out["still"] = node.watch_health(config, 0.1)
        edit(lambda d: d["devices"][0].pop("fail"))
        out["back"] = node.watch_health(config, 0.1)
        out["after"] = [d.healthy for d in node.discover(config)]
        """,
    )

    assert out["lost"][0] == [gpu_uuid(0), "NVIDIA A100-PCIE-16GB", 0, 16384, 1, "hami-core", False]
    assert out["still"] == []
    assert out["back"] == [gpu_uuid(0)]
    assert out["after"] == [True, True]


def test_link_scores_through_nvml_topology_and_nvlink(fake_gpus: FakeGpus, fake_nvml_dir: Path):
    fake_gpus.doc["devices"].append(
        {"uuid": gpu_uuid(2), "memory_mib": 16384, "bus_id": "00000000:5E:00.0"}
    )
    fake_gpus.doc["devices"][0]["nvlinks"] = [{"peer": 1, "links": 4}]
    fake_gpus.doc["topology"] = {"0-2": 20, "1-2": 50}
    fake_gpus.write()

    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        node = NvidiaNode()
        out["scores"] = node.link_scores(node.discover(section(plugin)))
        """,
    )

    a, b, c = (gpu_uuid(i) for i in range(3))
    assert out["scores"] == {
        a: {b: 400, c: 40},
        b: {a: 400, c: 10},
        c: {a: 40, b: 10},
    }


def test_the_stand_in_is_loaded_by_name_through_the_library_path(
    fake_gpus: FakeGpus, fake_nvml_dir: Path
):
    out = run(
        fake_gpus,
        fake_nvml_dir,
        """
        import pynvml
        pynvml.nvmlInit()
        out["lib"] = pynvml.nvmlLib._name
        out["driver"] = pynvml.nvmlSystemGetDriverVersion()
        out["maps"] = [l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml" in l][:1]
        """,
    )

    assert out["lib"] == "libnvidia-ml.so.1"
    assert out["driver"] == "550.54.15"
    assert out["maps"] == [str(fake_nvml_dir / "libnvidia-ml.so.1")]


def test_per_process_device_memory_through_pynvml(fake_gpus: FakeGpus, fake_nvml_dir: Path):
    """Issue 24 item 19: the monitor's host measure, through the real pynvml and the
    stand-in's per-process calls. GPU 0: two compute processes and one also holding a
    graphics context (counted once, the larger figure), one the driver cannot size
    (``NVML_VALUE_NOT_AVAILABLE``: left out); GPU 1: none. A driver without the ``_v3``
    calls answers through ``_v2``; a GPU without per-process accounting says so (None)."""
    gib = 1 << 30
    fake_gpus.doc["devices"][0]["processes"] = [
        {"pid": 4242, "used_bytes": 5 * gib},
        {"pid": 4343, "used_bytes": gib},
        {"pid": 4343, "used_bytes": 2 * gib, "type": "graphics"},
        {"pid": 4444, "used_bytes": -1},
    ]
    fake_gpus.write()
    body = """
        from hami_nvidia.monitor import host_devices
        from hami_nvidia.nvml import PynvmlLibrary
        out["v3"] = [[d.uuid, [[p.pid, p.memory_used_bytes] for p in d.processes]]
                     for d in host_devices(PynvmlLibrary())]
        edit(lambda doc: doc["devices"][0].setdefault("fail", {}).update(
            {"nvmlDeviceGetComputeRunningProcesses_v3": 13,
             "nvmlDeviceGetGraphicsRunningProcesses_v3": 13}))
        out["v2"] = [[p.pid, p.memory_used_bytes] for p in host_devices(PynvmlLibrary())[0].processes]
        edit(lambda doc: doc["devices"][1].setdefault("fail", {}).update(
            {"nvmlDeviceGetComputeRunningProcesses_v3": 3}))
        out["unsupported"] = host_devices(PynvmlLibrary())[1].processes
        """
    out = run(fake_gpus, fake_nvml_dir, body)
    expected = [[4242, 5 * gib], [4343, 2 * gib]]
    assert out["v3"] == [[gpu_uuid(0), expected], [gpu_uuid(1), []]]
    assert out["v2"] == expected
    assert out["unsupported"] is None
