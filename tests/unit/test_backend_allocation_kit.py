"""The kit's allocate and discovery helpers (``discovered``, ``IndexedDevices``,
``ConfiguredTool``)."""

from __future__ import annotations

import attrs
import pytest

from hami_core.backend import (
    ConfiguredTool,
    ContainerAllocation,
    ContainerDevice,
    DeviceNode,
    IndexedDevices,
    InvalidInputError,
    Mount,
    VendorConfig,
    discovered,
)
from tests.builders import gpu

NODE = [gpu("G-0", index=0), gpu("G-1", index=3)]


def slices(*uuids: str, cores: int = 100) -> tuple[ContainerDevice, ...]:
    return tuple(
        ContainerDevice(uuid=u, vendor="NVIDIA", memory_mib=1000, cores_pct=cores) for u in uuids
    )


def test_discovered_matches_each_slice_in_order_and_names_a_device_the_node_lacks():
    assert [d.index for d in discovered(slices("G-1", "G-0"), NODE, what="GPU")] == [3, 0]
    assert discovered((), NODE, what="GPU") == []
    with pytest.raises(InvalidInputError) as exc:
        discovered(slices("G-0", "G-9"), NODE, what="DCU", tool="hy-smi")
    assert str(exc.value) == "DCU G-9 is not on this node (hy-smi does not list it)"
    with pytest.raises(InvalidInputError, match="^GPU G-0 is not on this node$"):
        discovered(slices("G-0"), [], what="GPU")


def limit(devices, config):
    return ContainerAllocation(envs={"X_LIMIT": str(devices[0].memory_mib)})


XPU = IndexedDevices(
    visible_devices="X_VISIBLE",
    none="none",
    device_nodes=("/dev/x{index}",),
    host_optional_nodes=("/nonexistent/x-ipcm{index}",),
    control_nodes=("/dev/xctl",),
    extra=limit,
)


def section(use_runtime: bool) -> VendorConfig:
    return VendorConfig(options={"useContainerRuntime": use_runtime})


def test_indexed_devices_write_node_indices_and_keep_an_unknown_uuid():
    got = XPU(slices("G-1", "G-0", "G-7"), section(True), indices={"G-0": 0, "G-1": 3})
    assert got == ContainerAllocation(envs={"X_VISIBLE": "3,0,G-7", "X_LIMIT": "1000"})
    assert XPU((), section(True), indices={}) == ContainerAllocation(envs={"X_VISIBLE": "none"})
    silent = attrs.evolve(XPU, none=None, extra=None)
    assert silent((), section(True), indices={}) == ContainerAllocation()


def test_without_the_runtime_the_known_indices_nodes_and_the_control_node():
    got = XPU(slices("G-1", "G-7"), section(False), indices={"G-1": 3})
    assert got.device_nodes == (
        DeviceNode(container_path="/dev/x3", host_path="/dev/x3"),
        DeviceNode(container_path="/dev/xctl", host_path="/dev/xctl"),
    )

    def mount(devices, config):
        return ContainerAllocation(mounts=(Mount(container_path="/t", host_path="/t"),))

    # an optional node the host has (/dev/null exists everywhere) is exposed
    host = attrs.evolve(XPU, host_optional_nodes=("/dev/null",), extra=mount)
    with_host = host(slices("G-1"), section(False), indices={"G-1": 3})
    assert [n.host_path for n in with_host.device_nodes] == ["/dev/x3", "/dev/null", "/dev/xctl"]
    assert with_host.mounts == (Mount(container_path="/t", host_path="/t"),)


def test_a_configured_tool_runs_the_sections_command_and_answers_its_output():
    tool = ConfiguredTool(command_key="toolCommand", timeout_key="toolTimeoutSeconds")
    section = VendorConfig(options={"toolCommand": "smi info -q 'a b'", "toolTimeoutSeconds": 3})
    seen: list[list[str]] = []

    def runner(argv):
        seen.append(list(argv))
        return "Card 0\n"

    assert tool.output(section, runner) == "Card 0\n" and seen == [["smi", "info", "-q", "a b"]]
    assert tool.output(section, lambda argv: None) is None
    missing = VendorConfig(options={"toolCommand": "/nonexistent/smi", "toolTimeoutSeconds": 3})
    assert tool.output(missing) is None
