"""The PodResources client speaks kubelet's wire: v1 first, v1alpha1 when v1 is not
served (both as kubelet 1.20 serves them, the same field numbers), and says clearly
when kubelet cannot be reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor

from hami_core.deviceplugin.podresources import (
    KubeletContainer,
    KubeletPod,
    PodResourcesUnavailableError,
)
from hami_core.servers.kubelet import podresources_pb2 as pb
from hami_core.servers.podresources import KubeletPodResources
from tests.deviceplugin.fakepodresources import serve

PODS = [
    KubeletPod(
        namespace="ns",
        name="a",
        containers=(
            KubeletContainer(name="main", devices={"nvidia.com/gpu": ("GPU-x-0", "GPU-y-3")}),
            KubeletContainer(name="side"),
        ),
    ),
    KubeletPod(namespace="ns", name="b", containers=(KubeletContainer(name="main"),)),
]


@pytest.mark.parametrize("versions", [("v1", "v1alpha1"), ("v1",), ("v1alpha1",)])
def test_lists_kubelets_pods_and_devices_on_either_version(tmp_path: Path, versions):
    sock = str(tmp_path / "kubelet.sock")
    with serve(lambda: PODS, sock, versions=versions):
        client = KubeletPodResources(sock)
        assert list(client.list()) == PODS
        assert client.version == versions[0]
        assert list(client.list()) == PODS  # the version found is kept
        client.close()
    assert PODS[0].devices_of("main", "nvidia.com/gpu") == ("GPU-x-0", "GPU-y-3")
    assert PODS[0].devices_of("side", "nvidia.com/gpu") == ()


def test_no_kubelet_is_a_clear_unavailable_error(tmp_path: Path):
    client = KubeletPodResources(str(tmp_path / "absent.sock"), timeout_s=0.5)
    with pytest.raises(PodResourcesUnavailableError, match="absent.sock: UNAVAILABLE"):
        client.list()


def test_the_messages_are_kubelets_v1():
    # k8s.io/kubelet pkg/apis/podresources/v1/api.proto (1.20): package, method, fields.
    assert pb.DESCRIPTOR.package == "v1"
    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in service.methods] == ["List"]
    want = {
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3},
        "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
        "TopologyInfo": {"nodes": 1},
        "NUMANode": {"ID": 1},
    }
    for message, fields in want.items():
        d: descriptor.Descriptor = pb.DESCRIPTOR.message_types_by_name[message]
        assert {f.name: f.number for f in d.fields} == fields
