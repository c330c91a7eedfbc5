"""The project's .proto subsets stay wire-compatible with upstream.

Upstream NRI, CRI and PodResources come from Debian's `golang-github-containerd-nri-dev`,
`golang-github-kubernetes-cri-api-dev` and `golang-github-kubernetes-kubelet-dev` (fetched by
hack/fetch-debs into .cache/debian), compiled here into descriptors. Every message, field, enum value and
method the project declares must exist upstream with the same number, type, label and type name. The only
exceptions are in NEWER_THAN_DEBIAN and PODRESOURCES_NEWER_THAN_DEBIAN: items added by releases newer than
the Debian package, which must be absent upstream, so the tables have to shrink when Debian catches up.
PodResources numbers are also pinned from the kubelet's api.proto, the pod-level fields included. The ttrpc
envelope is checked byte for byte against a captured containerd exchange.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor

from podlevel._proto.cri import api_pb2 as cri_pb2
from podlevel._proto.nri import api_pb2 as nri_pb2
from podlevel._proto.podresources import api_pb2 as podresources_pb2
from podlevel._proto.ttrpc import ttrpc_pb2
from support import debian_protos
from support.debian_protos import CRI_PROTO, NRI_PROTO, PODRESOURCES_PROTO, versions

pytestmark = pytest.mark.timeout(900)  # the first test pays for apt-get update + download

DEBIAN_PACKAGES = (debian_protos.NRI, debian_protos.CRI, debian_protos.KUBELET)

# Items of proto/nri/api.proto that Debian's NRI (0.8.0 when this was written) predates, keyed as
# "rpc Service.Method", "field Message.field" or "enum Enum.VALUE", with the NRI release that added them
# (containerd/nri pkg/api/api.proto at that tag). A method's request and response messages are covered
# by its entry.
NEWER_THAN_DEBIAN = {
    "rpc Plugin.UpdatePodSandbox": "v0.10.0",
    "rpc Plugin.ValidateContainerAdjustment": "v0.10.0",
    "enum Event.UPDATE_POD_SANDBOX": "v0.10.0",
    "enum Event.POST_UPDATE_POD_SANDBOX": "v0.10.0",
    "enum Event.VALIDATE_CONTAINER_ADJUSTMENT": "v0.10.0",
    "field RegisterPluginRequest.NRI_version": "v0.12.0",
    "field ConfigureRequest.NRI_version": "v0.12.0",
    "rpc Plugin.RunPodSandbox": "v0.12.0",
    "rpc Plugin.PostUpdatePodSandbox": "v0.12.0",
    "rpc Plugin.StopPodSandbox": "v0.12.0",
    "rpc Plugin.RemovePodSandbox": "v0.12.0",
    "rpc Plugin.PostCreateContainer": "v0.12.0",
    "rpc Plugin.StartContainer": "v0.12.0",
    "rpc Plugin.PostStartContainer": "v0.12.0",
    "rpc Plugin.PostUpdateContainer": "v0.12.0",
    "rpc Plugin.RemoveContainer": "v0.12.0",
}


@dataclass(frozen=True)
class Api:
    """One proto file's declarations, flattened and keyed by name relative to its package."""

    package: str
    messages: dict[str, descriptor_pb2.DescriptorProto]
    enums: dict[str, descriptor_pb2.EnumDescriptorProto]
    methods: dict[str, descriptor_pb2.MethodDescriptorProto]

    @classmethod
    def of(cls, proto: descriptor_pb2.FileDescriptorProto) -> Api:
        messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}

        def walk(prefix: str, msgs: Iterator[descriptor_pb2.DescriptorProto]) -> None:
            for m in msgs:
                messages[prefix + m.name] = m
                enums.update((f"{prefix}{m.name}.{e.name}", e) for e in m.enum_type)
                walk(f"{prefix}{m.name}.", iter(m.nested_type))

        walk("", iter(proto.message_type))
        enums.update((e.name, e) for e in proto.enum_type)
        methods = {f"{s.name}.{m.name}": m for s in proto.service for m in s.method}
        return cls(proto.package, messages, enums, methods)


def project_api(module_descriptor: FileDescriptor) -> Api:
    proto = descriptor_pb2.FileDescriptorProto()
    module_descriptor.CopyToProto(proto)
    return Api.of(proto)


def field_shape(f: descriptor_pb2.FieldDescriptorProto) -> tuple[object, ...]:
    """What decides a field's wire format and meaning (json names and comments do not)."""
    return (f.number, descriptor_pb2.FieldDescriptorProto.Type.Name(f.type),
            descriptor_pb2.FieldDescriptorProto.Label.Name(f.label), f.type_name, f.proto3_optional)


def differences(ours: Api, upstream: Api, newer: dict[str, str]) -> list[str]:
    """Every declaration of ours that upstream lacks or declares differently, unless listed in newer."""
    problems: list[str] = []
    if ours.package != upstream.package:
        problems.append(f"package {ours.package!r} != upstream {upstream.package!r}")
    newer_messages = {
        t.rsplit(".", 1)[-1]
        for key in newer if key.startswith("rpc ")
        for t in (ours.methods[key[4:]].input_type, ours.methods[key[4:]].output_type)
    }
    for name, msg in ours.messages.items():
        up = upstream.messages.get(name)
        if up is None:
            if name not in newer_messages:
                problems.append(f"message {name}: not upstream")
            continue
        up_fields = {f.name: f for f in up.field}
        for f in msg.field:
            key = f"field {name}.{f.name}"
            if f.name not in up_fields:
                if key not in newer:
                    problems.append(f"{key}: not upstream")
            elif field_shape(f) != field_shape(up_fields[f.name]):
                problems.append(f"{key}: ours {field_shape(f)} != upstream {field_shape(up_fields[f.name])}")
        if msg.options.map_entry != up.options.map_entry:
            problems.append(f"message {name}: map_entry differs")
    for name, enum in ours.enums.items():
        up_enum = upstream.enums.get(name)
        up_values = {v.name: v.number for v in up_enum.value} if up_enum else {}
        if up_enum is None:
            problems.append(f"enum {name}: not upstream")
            continue
        for v in enum.value:
            key = f"enum {name}.{v.name}"
            if v.name not in up_values:
                if key not in newer:
                    problems.append(f"{key}: not upstream")
            elif v.number != up_values[v.name]:
                problems.append(f"{key}: ours {v.number} != upstream {up_values[v.name]}")
    for name, method in ours.methods.items():
        up_method = upstream.methods.get(name)
        if up_method is None:
            if f"rpc {name}" not in newer:
                problems.append(f"rpc {name}: not upstream")
            continue
        shape = (method.input_type, method.output_type, method.client_streaming, method.server_streaming)
        up_shape = (up_method.input_type, up_method.output_type,
                    up_method.client_streaming, up_method.server_streaming)
        if shape != up_shape:
            problems.append(f"rpc {name}: ours {shape} != upstream {up_shape}")
    return problems


def still_newer(ours: Api, upstream: Api, newer: dict[str, str]) -> list[str]:
    """Entries of newer that upstream now has (drop them from the table) or that we no longer declare."""
    problems: list[str] = []
    for key, version in newer.items():
        kind, _, path = key.partition(" ")
        owner, _, member = path.rpartition(".")
        if kind == "rpc":
            ours_has, up_has = path in ours.methods, path in upstream.methods
        elif kind == "field":
            ours_has = member in {f.name for f in ours.messages[owner].field}
            up_has = owner in upstream.messages and member in {f.name for f in upstream.messages[owner].field}
        else:
            ours_has = member in {v.name for v in ours.enums[owner].value}
            up_has = owner in upstream.enums and member in {v.name for v in upstream.enums[owner].value}
        if not ours_has:
            problems.append(f"{key} ({version}): listed but not declared in proto/")
        if up_has:
            problems.append(f"{key} ({version}): Debian now has it; remove it from NEWER_THAN_DEBIAN")
    return problems


@pytest.fixture(scope="session")
def debian_root() -> Path:
    """Download (or reuse) the Debian -dev packages carrying the upstream .proto files."""
    try:
        return debian_protos.fetch(*DEBIAN_PACKAGES)
    except debian_protos.FetchFailed as err:
        pytest.fail(str(err))


def compile_upstream(source: Path, tmp: Path) -> Api:
    """Compile one upstream .proto into a descriptor, without the Go-only gogoproto import and options."""
    (tmp / "api.proto").write_text(debian_protos.without_gogoproto(source))
    out = tmp / "api.pb"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"--descriptor_set_out={out}",
                    "api.proto"], check=True, cwd=tmp)
    (proto,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return Api.of(proto)


@pytest.fixture(scope="session")
def upstream_nri(debian_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Api:
    return compile_upstream(debian_root / NRI_PROTO, tmp_path_factory.mktemp("nri"))


@pytest.fixture(scope="session")
def upstream_podresources(debian_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Api:
    return compile_upstream(debian_root / PODRESOURCES_PROTO, tmp_path_factory.mktemp("podresources"))


@pytest.fixture(scope="session")
def upstream_cri(debian_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Api:
    return compile_upstream(debian_root / CRI_PROTO, tmp_path_factory.mktemp("cri"))


def test_nri_subset_matches_debian_upstream(upstream_nri: Api) -> None:
    problems = differences(project_api(nri_pb2.DESCRIPTOR), upstream_nri, NEWER_THAN_DEBIAN)
    assert not problems, f"proto/nri/api.proto vs Debian ({versions()}):\n" + "\n".join(problems)


def test_newer_than_debian_table_is_current(upstream_nri: Api) -> None:
    problems = still_newer(project_api(nri_pb2.DESCRIPTOR), upstream_nri, NEWER_THAN_DEBIAN)
    assert not problems, f"NEWER_THAN_DEBIAN vs Debian ({versions()}):\n" + "\n".join(problems)


def test_cri_subset_matches_debian_upstream(upstream_cri: Api) -> None:
    problems = differences(project_api(cri_pb2.DESCRIPTOR), upstream_cri, {})
    assert not problems, f"proto/cri/api.proto vs Debian ({versions()}):\n" + "\n".join(problems)


# The pod-level fields of PodResources that Debian's kubelet API (1.32.7 when this was written) predates.
PODRESOURCES_NEWER_THAN_DEBIAN = {
    "field PodResources.cpu_ids": "v1.37.0",
    "field PodResources.memory": "v1.37.0",
}


def test_podresources_matches_debian_upstream(upstream_podresources: Api) -> None:
    ours = project_api(podresources_pb2.DESCRIPTOR)
    problems = differences(ours, upstream_podresources, PODRESOURCES_NEWER_THAN_DEBIAN)
    problems += still_newer(ours, upstream_podresources, PODRESOURCES_NEWER_THAN_DEBIAN)
    assert not problems, f"proto/podresources/api.proto vs Debian ({versions()}):\n" + "\n".join(problems)


def test_comparison_catches_a_renumbered_field(upstream_nri: Api) -> None:
    """Guards the checker itself: a wrong number, type or missing message must be reported."""
    proto = descriptor_pb2.FileDescriptorProto()
    nri_pb2.DESCRIPTOR.CopyToProto(proto)
    linux_cpu = next(m for m in proto.message_type if m.name == "LinuxCPU")
    next(f for f in linux_cpu.field if f.name == "cpus").number = 8
    next(f for f in linux_cpu.field if f.name == "mems").type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    proto.message_type.add(name="NotUpstream")
    problems = differences(Api.of(proto), upstream_nri, NEWER_THAN_DEBIAN)
    assert [p.split(":")[0] for p in problems] == [
        "field LinuxCPU.cpus", "field LinuxCPU.mems", "message NotUpstream"]


# kubelet pkg/apis/podresources/v1/api.proto (reference: kubelet-resource-managers.md section 5);
# PodResources cpu_ids=4 and memory=5 carry the pod-level assignment.
PODRESOURCES_FIELDS = {
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [("devices", 1, "repeated", ".v1.ContainerDevices"),
                                     ("cpu_ids", 2, "repeated", "int64"),
                                     ("memory", 3, "repeated", ".v1.ContainerMemory")],
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, "repeated", ".v1.PodResources")],
    "GetPodResourcesRequest": [("pod_name", 1, "optional", "string"),
                               ("pod_namespace", 2, "optional", "string")],
    "GetPodResourcesResponse": [("pod_resources", 1, "optional", ".v1.PodResources")],
    "PodResources": [("name", 1, "optional", "string"), ("namespace", 2, "optional", "string"),
                     ("containers", 3, "repeated", ".v1.ContainerResources"),
                     ("cpu_ids", 4, "repeated", "int64"), ("memory", 5, "repeated", ".v1.ContainerMemory")],
    "ContainerResources": [("name", 1, "optional", "string"),
                           ("devices", 2, "repeated", ".v1.ContainerDevices"),
                           ("cpu_ids", 3, "repeated", "int64"),
                           ("memory", 4, "repeated", ".v1.ContainerMemory")],
    "ContainerMemory": [("memory_type", 1, "optional", "string"), ("size", 2, "optional", "uint64"),
                        ("topology", 3, "optional", ".v1.TopologyInfo")],
    "ContainerDevices": [("resource_name", 1, "optional", "string"),
                         ("device_ids", 2, "repeated", "string"),
                         ("topology", 3, "optional", ".v1.TopologyInfo")],
    "TopologyInfo": [("nodes", 1, "repeated", ".v1.NUMANode")],
    "NUMANode": [("ID", 1, "optional", "int64")],
}
PODRESOURCES_METHODS = {
    "PodResourcesLister.List": (".v1.ListPodResourcesRequest", ".v1.ListPodResourcesResponse"),
    "PodResourcesLister.GetAllocatableResources": (".v1.AllocatableResourcesRequest",
                                                   ".v1.AllocatableResourcesResponse"),
    "PodResourcesLister.Get": (".v1.GetPodResourcesRequest", ".v1.GetPodResourcesResponse"),
}


def test_podresources_matches_kubelet_numbers() -> None:
    api = project_api(podresources_pb2.DESCRIPTOR)
    assert api.package == "v1"

    def kind(f: descriptor_pb2.FieldDescriptorProto) -> str:
        scalar = descriptor_pb2.FieldDescriptorProto.Type.Name(f.type).removeprefix("TYPE_").lower()
        return f.type_name or scalar

    declared = {
        name: [(f.name, f.number, descriptor_pb2.FieldDescriptorProto.Label.Name(f.label)
                .removeprefix("LABEL_").lower(), kind(f)) for f in msg.field]
        for name, msg in api.messages.items()
    }
    assert declared == PODRESOURCES_FIELDS
    methods = {name: (m.input_type, m.output_type) for name, m in api.methods.items()
               if not (m.client_streaming or m.server_streaming)}
    assert methods == PODRESOURCES_METHODS


# Bytes captured between containerd 2.1.9 and a Python plugin (containerd-nri-recipe.md, "Observed
# exchange"): the ttrpc payloads only, without the mux and ttrpc headers.
OBSERVED_REGISTER_REQUEST = (
    bytes.fromhex("0a1c") + b"nri.pkg.api.v1alpha1.Runtime" + bytes.fromhex("120e") + b"RegisterPlugin"
    + bytes.fromhex("1a0e 0a08") + b"py-probe" + bytes.fromhex("1202") + b"20"
    + bytes.fromhex("20 80a8d6b907")
)
OBSERVED_CONFIGURE_REQUEST_PREFIX = (
    bytes.fromhex("0a1b") + b"nri.pkg.api.v1alpha1.Plugin" + bytes.fromhex("1209") + b"Configure"
    + bytes.fromhex("1a21 120a") + b"containerd" + bytes.fromhex("1a0d") + b"2.1.9+unknown"
    + bytes.fromhex("20 8827 28 d00f")
)
OBSERVED_CONFIGURE_RESPONSE = bytes.fromhex("0a00 1203 10ff0c")


def test_ttrpc_register_request_encodes_as_observed() -> None:
    register = nri_pb2.RegisterPluginRequest(plugin_name="py-probe", plugin_idx="20")
    request = ttrpc_pb2.Request(service="nri.pkg.api.v1alpha1.Runtime", method="RegisterPlugin",
                                payload=register.SerializeToString(), timeout_nano=2_000_000_000)
    assert request.SerializeToString() == OBSERVED_REGISTER_REQUEST
    assert len(OBSERVED_REGISTER_REQUEST) == 0x44  # the ttrpc header's length field


def test_ttrpc_configure_request_decodes_as_observed() -> None:
    configure = nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.9+unknown",
                                         registration_timeout=5000, request_timeout=2000)
    request = ttrpc_pb2.Request(service="nri.pkg.api.v1alpha1.Plugin", method="Configure",
                                payload=configure.SerializeToString())
    assert request.SerializeToString() == OBSERVED_CONFIGURE_REQUEST_PREFIX
    decoded = ttrpc_pb2.Request.FromString(OBSERVED_CONFIGURE_REQUEST_PREFIX)
    assert nri_pb2.ConfigureRequest.FromString(decoded.payload) == configure


def test_ttrpc_responses_encode_as_observed() -> None:
    events = 0x67F
    response = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=0),
                                  payload=nri_pb2.ConfigureResponse(events=events).SerializeToString())
    assert response.SerializeToString() == OBSERVED_CONFIGURE_RESPONSE
    assert nri_pb2.ConfigureResponse.FromString(ttrpc_pb2.Response.FromString(
        OBSERVED_CONFIGURE_RESPONSE).payload).events == events
    empty = ttrpc_pb2.Response.FromString(b"")  # RegisterPlugin's reply: no status means OK
    assert not empty.HasField("status")
    assert empty.payload == nri_pb2.Empty().SerializeToString() == b""


def test_ttrpc_status_is_wire_identical_to_google_rpc_status() -> None:
    """google.rpc.Status{code=1 int32, message=2 string, details=3 repeated Any}."""
    fields = {f.name: (f.number, f.type, f.label, f.type_name)
              for f in project_api(ttrpc_pb2.DESCRIPTOR).messages["Status"].field}
    proto = descriptor_pb2.FieldDescriptorProto
    assert fields == {
        "code": (1, proto.TYPE_INT32, proto.LABEL_OPTIONAL, ""),
        "message": (2, proto.TYPE_STRING, proto.LABEL_OPTIONAL, ""),
        "details": (3, proto.TYPE_MESSAGE, proto.LABEL_REPEATED, ".google.protobuf.Any"),
    }
    status = ttrpc_pb2.Status(code=12, message="unknown method")
    assert status.SerializeToString() == bytes.fromhex("080c 120e") + b"unknown method"
