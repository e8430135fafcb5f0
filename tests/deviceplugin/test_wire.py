"""The kubelet device plugin API as generated here matches kubelet's v1beta1 wire:
package, services, method paths, message and field numbers (k8s.io/kubelet
pkg/apis/deviceplugin/v1beta1/api.proto), and the committed modules are what
scripts/gen-proto.sh generates."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import descriptor, descriptor_pb2

from hami_core.servers.kubelet import api_pb2 as pb

REPO = Path(__file__).resolve().parents[2]

# message -> {field: (number, label, type)}; label R = repeated; types as in the .proto.
KUBELET_V1BETA1 = {
    "DevicePluginOptions": {
        "pre_start_required": (1, "", "bool"),
        "get_preferred_allocation_available": (2, "", "bool"),
    },
    "RegisterRequest": {
        "version": (1, "", "string"),
        "endpoint": (2, "", "string"),
        "resource_name": (3, "", "string"),
        "options": (4, "", "DevicePluginOptions"),
    },
    "Empty": {},
    "ListAndWatchResponse": {"devices": (1, "R", "Device")},
    "TopologyInfo": {"nodes": (1, "R", "NUMANode")},
    "NUMANode": {"ID": (1, "", "int64")},
    "Device": {
        "ID": (1, "", "string"),
        "health": (2, "", "string"),
        "topology": (3, "", "TopologyInfo"),
    },
    "PreStartContainerRequest": {"devices_ids": (1, "R", "string")},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {
        "container_requests": (1, "R", "ContainerPreferredAllocationRequest")
    },
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": (1, "R", "string"),
        "must_include_deviceIDs": (2, "R", "string"),
        "allocation_size": (3, "", "int32"),
    },
    "PreferredAllocationResponse": {
        "container_responses": (1, "R", "ContainerPreferredAllocationResponse")
    },
    "ContainerPreferredAllocationResponse": {"deviceIDs": (1, "R", "string")},
    "AllocateRequest": {"container_requests": (1, "R", "ContainerAllocateRequest")},
    "ContainerAllocateRequest": {"devices_ids": (1, "R", "string")},
    "CDIDevice": {"name": (1, "", "string")},
    "AllocateResponse": {"container_responses": (1, "R", "ContainerAllocateResponse")},
    "ContainerAllocateResponse": {
        "envs": (1, "R", "EnvsEntry"),
        "mounts": (2, "R", "Mount"),
        "devices": (3, "R", "DeviceSpec"),
        "annotations": (4, "R", "AnnotationsEntry"),
        "cdi_devices": (5, "R", "CDIDevice"),
    },
    "Mount": {
        "container_path": (1, "", "string"),
        "host_path": (2, "", "string"),
        "read_only": (3, "", "bool"),
    },
    "DeviceSpec": {
        "container_path": (1, "", "string"),
        "host_path": (2, "", "string"),
        "permissions": (3, "", "string"),
    },
}

_SCALARS = {
    descriptor.FieldDescriptor.TYPE_BOOL: "bool",
    descriptor.FieldDescriptor.TYPE_STRING: "string",
    descriptor.FieldDescriptor.TYPE_INT64: "int64",
    descriptor.FieldDescriptor.TYPE_INT32: "int32",
}


def _shape(message: descriptor.Descriptor) -> dict[str, tuple[int, str, str]]:
    out = {}
    for f in message.fields:
        kind = f.message_type.name if f.message_type is not None else _SCALARS[f.type]
        # protobuf 4.21 (the declared floor) has label, 7.x only is_repeated.
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
        out[f.name] = (f.number, "R" if repeated else "", kind)
    return out


def test_the_package_and_every_message_match_kubelet():
    assert pb.DESCRIPTOR.package == "v1beta1"
    assert set(pb.DESCRIPTOR.message_types_by_name) == set(KUBELET_V1BETA1)
    for name, fields in KUBELET_V1BETA1.items():
        assert _shape(pb.DESCRIPTOR.message_types_by_name[name]) == fields, name


def test_map_fields_are_string_to_string():
    response = pb.DESCRIPTOR.message_types_by_name["ContainerAllocateResponse"]
    for field in ("envs", "annotations"):
        entry = response.fields_by_name[field].message_type
        assert entry.GetOptions().map_entry
        assert _shape(entry) == {"key": (1, "", "string"), "value": (2, "", "string")}


def test_method_paths_are_kubelets():
    registration = pb.DESCRIPTOR.services_by_name["Registration"]
    plugin = pb.DESCRIPTOR.services_by_name["DevicePlugin"]
    assert [m.full_name for m in registration.methods] == ["v1beta1.Registration.Register"]
    # The descriptor protos read the same on every protobuf (4.21's MethodDescriptor has
    # no server_streaming attribute).
    service = descriptor_pb2.ServiceDescriptorProto()
    plugin.CopyToProto(service)
    assert {
        m.name: (
            m.input_type.rsplit(".", 1)[-1],
            m.output_type.rsplit(".", 1)[-1],
            m.server_streaming,
        )
        for m in service.method
    } == {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": (
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
            False,
        ),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    }


def test_a_kubelet_allocate_request_decodes():
    # AllocateRequest{container_requests: [{devices_ids: ["GPU-a-0", "GPU-b-3"]}]} as Go
    # protobuf encodes it: field 1 (LEN) -> field 1 (LEN) strings.
    wire = bytes.fromhex("0a12" + "0a07" + b"GPU-a-0".hex() + "0a07" + b"GPU-b-3".hex())

    request = pb.AllocateRequest.FromString(wire)

    assert [list(r.devices_ids) for r in request.container_requests] == [["GPU-a-0", "GPU-b-3"]]


def test_the_committed_modules_are_what_the_script_generates():
    # The script installs its pinned grpcio-tools into ~/.cache/hami once (the floors of
    # hami-core[server] come from that version).
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gen-proto.sh"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
