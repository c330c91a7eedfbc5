"""Kubernetes Pod manifests, and the compact pod-shape annotation, turned into the engine's `Pod`.

Only what the resource managers read survives: names, container kinds, the `cpu`, `memory` and `hugepages-*`
requests and limits of every container, and the pod-level budget (`spec.resources`). Parsing enforces the
API server's rules the engine relies on (requests <= limits, a pod budget that covers the containers'
aggregate, no container limit above the pod's, unique container names), so the engine never sees a pod the
API server would have refused. Every error is an `InputError` whose rule names the broken rule and whose
message starts with the field path.

A pod without `spec.resources` is kept as such (`Pod.resources is None`): the engine then handles it the
kubelet's classic per-container way. A fractional CPU request on an otherwise Guaranteed container is not an
error either; that container is simply not exclusive.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from podlevel.engine.errors import InputError
from podlevel.engine.limits import (
    MAX_ANNOTATIONS_BYTES,
    check_dns1123_label,
    check_dns1123_subdomain,
    check_resource_name,
    quote,
)
from podlevel.engine.pod import (
    CPU,
    HUGEPAGES_PREFIX,
    MEMORY,
    Container,
    ContainerKind,
    Pod,
    Resources,
)
from podlevel.engine.quantity import bytes_of, format_amount, format_bytes, milli_cpu
from podlevel.podspec.documents import JSONNumber, load_json

SHAPE_ANNOTATION: Final = "nri-podlevel.io/pod-shape"
"""The pod annotation whose value is `to_annotation(pod)`; the NRI side reads it with `from_annotation`."""
SHAPE_VERSION: Final = 1

_UID_MAX: Final = 128
"""A uid is the API server's (a UUID, 36 characters); anything longer is not one, and uids are logged."""
_UID_NAMESPACE: Final = uuid.UUID("6f1c52a4-5d0e-4c55-9f51-8d3a2b7e0c11")
"""Fixed namespace for uid5 so a manifest without `metadata.uid` gets the same uid on every run."""


def derived_uid(namespace: str, name: str) -> str:
    """The uid a pod without `metadata.uid` gets: stable for its namespace/name, shaped like a real one."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{namespace}/{name}"))


def pod_from_manifest(document: object, where: str = "<input>") -> Pod:
    """One Pod manifest (as PyYAML or json loads it) -> `Pod`."""
    manifest = _mapping(document, where, "")
    kind = manifest.get("kind")
    if kind != "Pod":
        raise InputError("manifest kind", f"{where}: kind is {quote(kind)}, expected 'Pod'")
    metadata = _mapping(manifest.get("metadata"), where, "metadata")
    name, namespace = identity(metadata, where)
    uid = metadata.get("uid")
    if uid is None:
        uid = derived_uid(namespace, name)
    elif not isinstance(uid, str) or not uid or len(uid) > _UID_MAX:
        raise InputError(
            "manifest", f"{where}: metadata.uid must be a non-empty string of at most {_UID_MAX} characters"
        )
    spec = _mapping(manifest.get("spec"), where, "spec")
    return pod_from_spec(spec, where, "spec.", uid=uid, name=name, namespace=namespace)


def to_annotation(pod: Pod) -> str:
    """The pod's shape as compact JSON: a PodSpec subset in Kubernetes syntax, so one parser reads both.

    Identity (name, namespace, uid) is left out: the pod the annotation sits on already has it.
    """
    shape: dict[str, object] = {"v": SHAPE_VERSION}
    if pod.resources is not None:
        shape["resources"] = _resources_json(pod.resources)
    if pod.init_containers:
        shape["initContainers"] = [_container_json(c) for c in pod.init_containers]
    shape["containers"] = [_container_json(c) for c in pod.containers]
    return json.dumps(shape, separators=(",", ":"), sort_keys=True)


def check_annotated_identity(name: str, namespace: str) -> None:
    """The identity a shape annotation is read under, held to the API server's name rules (InputError)."""
    check_dns1123_label(namespace, f"annotation {SHAPE_ANNOTATION}: the pod's namespace")
    check_dns1123_subdomain(name, f"annotation {SHAPE_ANNOTATION}: the pod's name")


def from_annotation(text: str, *, name: str, namespace: str = "default", uid: str | None = None) -> Pod:
    """Read a `to_annotation` value back; identity comes from the caller (the sandbox the pod runs in).

    The pod's identity is held to the API server's name rules and the value to its annotation size limit
    before anything is decoded, so a message about the pod can always be formatted and stays short.
    """
    check_annotated_identity(name, namespace)
    where = f"annotation {SHAPE_ANNOTATION} of {namespace}/{name}"
    size = len(text.encode(errors="surrogatepass"))
    if size > MAX_ANNOTATIONS_BYTES:
        raise InputError("annotation size", f"{where}: {size} bytes, above the {MAX_ANNOTATIONS_BYTES} the "
                                            "API server allows for all of a pod's annotations together")
    shape = _mapping(load_json(text, where), where, "")
    version = shape.get("v")
    if not (isinstance(version, JSONNumber) and version == str(SHAPE_VERSION)):
        shown = version if isinstance(version, JSONNumber) else quote(version)
        raise InputError("pod shape", f"{where}: v is {shown}, this version reads {SHAPE_VERSION}")
    return pod_from_spec(
        shape, where, "", uid=uid or derived_uid(namespace, name), name=name, namespace=namespace
    )


def pod_from_spec(
    spec: Mapping[str, object], where: str, prefix: str, *, uid: str, name: str, namespace: str
) -> Pod:
    """A PodSpec (a Pod's, a workload's pod template's, or the annotation's subset) -> `Pod`; `prefix` is
    the spec's field path in the document, for messages."""
    init_containers = _containers(spec.get("initContainers"), where, f"{prefix}initContainers", init=True)
    containers = _containers(spec.get("containers"), where, f"{prefix}containers", init=False)
    if not containers:
        raise InputError("manifest", f"{where}: {prefix}containers must list at least one container")
    seen: dict[str, str] = {}
    for field, group in (("initContainers", init_containers), ("containers", containers)):
        for index, container in enumerate(group):
            path = f"{prefix}{field}[{index}].name"
            if container.name in seen:
                raise InputError(
                    "unique container names",
                    f"{where}: {path}: {container.name!r} is already {seen[container.name]}",
                )
            seen[container.name] = path
    resources: Resources | None = None
    if spec.get("resources") is not None:
        resources = _resources(spec["resources"], where, f"{prefix}resources", pod_level=True)
    pod = Pod(
        uid=uid,
        name=name,
        namespace=namespace,
        resources=resources,
        init_containers=init_containers,
        containers=containers,
    )
    _check_pod_budget(pod, where, prefix)
    return pod


def _containers(value: object, where: str, path: str, *, init: bool) -> tuple[Container, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError("manifest", f"{where}: {path} must be a list, not {type(value).__name__}")
    result: list[Container] = []
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        container = _mapping(item, where, item_path)
        name = _name(container.get("name"), where, f"{item_path}.name")
        check_dns1123_label(name, f"{where}: {item_path}.name")
        kind = ContainerKind.APP
        if init:
            restart_policy = container.get("restartPolicy")
            if restart_policy is not None and not isinstance(restart_policy, str):
                raise InputError("manifest", f"{where}: {item_path}.restartPolicy must be a string")
            kind = ContainerKind.SIDECAR if restart_policy == "Always" else ContainerKind.INIT
        resources = Resources()
        if container.get("resources") is not None:
            resources = _resources(container["resources"], where, f"{item_path}.resources", pod_level=False)
        result.append(Container(name=name, kind=kind, resources=resources))
    return tuple(result)


def _resources(value: object, where: str, path: str, *, pod_level: bool) -> Resources:
    body = _mapping(value, where, path)
    lists: dict[str, dict[str, int]] = {}
    for field in ("requests", "limits"):
        raw = body.get(field)
        quantities: dict[str, int] = {}
        if raw is not None:
            for resource, quantity in _mapping(raw, where, f"{path}.{field}").items():
                item_path = f"{path}.{field}.{resource}"
                check_resource_name(resource, f"{where}: {path}.{field}")
                parsed_name, amount = _quantity(str(resource), quantity, where, item_path)
                if parsed_name is None:
                    if pod_level:
                        raise InputError(
                            "pod-level resources",
                            f"{where}: {item_path}: a pod budget holds only cpu, memory and hugepages-<size>",
                        )
                    continue
                quantities[parsed_name] = amount
        lists[field] = quantities
    requests, limits = lists["requests"], lists["limits"]
    for resource, request in requests.items():
        limit = limits.get(resource)
        if limit is not None and request > limit:
            raise InputError(
                "requests <= limits",
                f"{where}: {path}.requests.{resource}: {format_amount(resource, request)} is above the limit "
                f"{format_amount(resource, limit)}",
            )
    return Resources(requests=MappingProxyType(requests), limits=MappingProxyType(limits))


def _quantity(resource: str, value: object, where: str, path: str) -> tuple[str | None, int]:
    """(engine resource name or None for resources the managers ignore, amount in engine units)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError("quantity", f"{where}: {path}: a {type(value).__name__} is not a quantity")
    try:
        if resource == CPU:
            return CPU, milli_cpu(value)
        amount = bytes_of(value)
        if resource.startswith(HUGEPAGES_PREFIX):
            page = bytes_of(resource.removeprefix(HUGEPAGES_PREFIX))
            if page == 0:
                raise InputError("quantity", f"hugepage size of {resource!r} is zero")
            return f"{HUGEPAGES_PREFIX}{format_bytes(page)}", amount
    except InputError as err:
        raise InputError(err.rule, f"{where}: {path}: {err.message}") from None
    return (MEMORY if resource == MEMORY else None), amount


def _check_pod_budget(pod: Pod, where: str, prefix: str) -> None:
    """The API server's pod-level consistency rules (`validatePodResourceConsistency`)."""
    if pod.resources is None:
        return
    budgets, path = pod.resources, f"{prefix}resources"
    for resource in budgets.requests.keys() | budgets.limits.keys():
        budget, ceiling = budgets.request(resource), budgets.limits.get(resource)
        if ceiling is not None and budget > ceiling:
            raise InputError(
                "requests <= limits",
                f"{where}: {path}.requests.{resource}: {format_amount(resource, budget)} is above the limit "
                f"{format_amount(resource, ceiling)}",
            )
        aggregate = pod.aggregate_request(resource)
        if aggregate > budget:
            raise InputError(
                "pod budget >= aggregate container requests",
                f"{where}: {path}.requests.{resource}: {format_amount(resource, budget)} is below the "
                f"containers' aggregate request {format_amount(resource, aggregate)}",
            )
        if ceiling is None:
            continue
        for field, group in (("initContainers", pod.init_containers), ("containers", pod.containers)):
            for index, container in enumerate(group):
                limit = container.resources.limits.get(resource, 0)
                if limit > ceiling:
                    raise InputError(
                        "container limit <= pod limit",
                        f"{where}: {prefix}{field}[{index}].resources.limits.{resource}: "
                        f"{format_amount(resource, limit)} is above the pod limit "
                        f"{format_amount(resource, ceiling)}",
                    )


def _resources_json(resources: Resources) -> dict[str, dict[str, str]]:
    body: dict[str, dict[str, str]] = {}
    for field, values in (("requests", resources.requests), ("limits", resources.limits)):
        if values:
            body[field] = {name: format_amount(name, amount) for name, amount in sorted(values.items())}
    return body


def _container_json(container: Container) -> dict[str, object]:
    body: dict[str, object] = {"name": container.name}
    if container.kind is ContainerKind.SIDECAR:
        body["restartPolicy"] = "Always"
    if not container.resources.is_empty():
        body["resources"] = _resources_json(container.resources)
    return body


def identity(metadata: Mapping[str, object], where: str) -> tuple[str, str]:
    """`metadata.name` and `metadata.namespace` (default "default"), held to the API server's name rules."""
    name = _name(metadata.get("name"), where, "metadata.name")
    check_dns1123_subdomain(name, f"{where}: metadata.name")
    namespace = metadata.get("namespace", "default")
    if not isinstance(namespace, str) or not namespace:
        raise InputError("manifest", f"{where}: metadata.namespace must be a non-empty string")
    check_dns1123_label(namespace, f"{where}: metadata.namespace")
    return name, namespace


def _mapping(value: object, where: str, path: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        what = path or "the document"
        raise InputError("manifest", f"{where}: {what} must be a mapping, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise InputError("manifest", f"{where}: {path or 'the document'} has a non-string key {key!r}")
    return value


def _name(value: object, where: str, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError("manifest", f"{where}: {path} is missing or not a non-empty string")
    return value
