"""Pods wherever a manifest describes them: a Pod, the pod template of a workload, the items of a `List`.

Real workloads are Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs; the pods their
controllers create are copies of the pod template, whose metadata (annotations included) every copy gets.
So the pod-shape annotation goes on the template, and a simulation admits as many copies as run at once:
`replicas` (default 1) of a Deployment, ReplicaSet or StatefulSet, `parallelism` (default 1) of a Job or of
a CronJob's job template, one of a DaemonSet (one per node, and the simulation is one node). Copy `i` is
named `<workload>-<i>` from 0, in the workload's namespace.

`annotate` edits the text in place (`podspec.yaml_edit`), so comments, key order, quoting and indentation
of the user's file stay as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import yaml

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_POD_COPIES, quote
from podlevel.engine.pod import Pod
from podlevel.podspec.documents import check_text
from podlevel.podspec.manifest import (
    SHAPE_ANNOTATION,
    derived_uid,
    identity,
    pod_from_manifest,
    pod_from_spec,
    to_annotation,
)
from podlevel.podspec.yaml_documents import yaml_error, yaml_loader
from podlevel.podspec.yaml_edit import Edit, apply_edits, node_at, set_value

Path = tuple[str | int, ...]

TEMPLATES: Final[Mapping[str, Path]] = {
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
"""Where each workload kind keeps its pod template."""

_COPIES: Final[Mapping[str, Path | None]] = {
    "Deployment": ("spec", "replicas"),
    "ReplicaSet": ("spec", "replicas"),
    "StatefulSet": ("spec", "replicas"),
    "DaemonSet": None,
    "Job": ("spec", "parallelism"),
    "CronJob": ("spec", "jobTemplate", "spec", "parallelism"),
}
"""The field that says how many copies of the template run at once (None: one on a node)."""


@dataclass(frozen=True, slots=True)
class PodSource:
    """A Pod manifest or a workload's pod template, found at `path` (document root -> the mapping whose
    `metadata.annotations` the pod gets). A template's `pod` carries the workload's name and namespace."""

    path: Path
    pod: Pod
    copies: int | None
    """How many pods the template stands for; None for a Pod manifest (the pod itself)."""

    def pods(self) -> list[Pod]:
        if self.copies is None:
            return [self.pod]
        ns, name = self.pod.namespace, self.pod.name
        return [
            dataclasses.replace(self.pod, name=f"{name}-{i}", uid=derived_uid(ns, f"{name}-{i}"))
            for i in range(self.copies)
        ]


@dataclass(frozen=True, slots=True)
class Document:
    node: yaml.Node
    data: object
    where: str


def parse(text: str, source: str) -> list[Document]:
    """The non-empty documents of a (multi-document) YAML or JSON text, with their nodes (for editing)."""
    loader = yaml_loader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                data = loader.construct_document(node)
                check_text(data, source)
                documents.append(Document(node, data, ""))
    except yaml.YAMLError as err:
        raise yaml_error(err, source) from None
    finally:
        loader.dispose()
    documents = [d for d in documents if d.data is not None]
    if len(documents) == 1:
        return [dataclasses.replace(documents[0], where=source)]
    return [dataclasses.replace(d, where=f"{source} document {i + 1}") for i, d in enumerate(documents)]


def pod_sources(document: object, where: str) -> list[PodSource]:
    """Every pod a document describes: a Pod, a workload's template, each item of a List."""
    manifest = _mapping(document, where, "the document")
    kind = manifest.get("kind")
    if kind == "Pod":
        return [PodSource((), pod_from_manifest(manifest, where), None)]
    if kind == "List":
        items = manifest.get("items")
        if not isinstance(items, list):
            raise InputError("manifest", f"{where}: items of a List must be a list")
        sources: list[PodSource] = []
        for index, item in enumerate(items):
            item_kind = _mapping(item, where, f"items[{index}]").get("kind")
            if item_kind == "List":
                raise InputError("manifest kind", f"{where}: items[{index}] is a List inside a List")
            for found in pod_sources(item, f"{where} items[{index}]"):
                sources.append(dataclasses.replace(found, path=("items", index, *found.path)))
        return sources
    if not isinstance(kind, str) or kind not in TEMPLATES:
        known = ", ".join(["Pod", *TEMPLATES, "List"])
        raise InputError("manifest kind", f"{where}: kind is {quote(kind)}, expected one of {known}")
    return [_template(manifest, kind, where)]


def load_pods(text: str, source: str = "<input>") -> list[Pod]:
    """Every pod of a text, in order: Pods as they are, each workload's template as its copies (a workload
    scaled to zero has none)."""
    sources = [found for doc in parse(text, source) for found in pod_sources(doc.data, doc.where)]
    if not sources:
        raise InputError("manifest", f"{source}: no pod in the input")
    return [pod for found in sources for pod in found.pods()]


def annotate(text: str, source: str = "<input>") -> str:
    """`text` with the pod-shape annotation set (added, or a stale one replaced) on every Pod and pod
    template, and nothing else changed."""
    edits: list[Edit] = []
    for document in parse(text, source):
        for found in pod_sources(document.data, document.where):
            target = node_at(document.node, found.path)
            edits.append(set_value(text, target, ("metadata", "annotations", SHAPE_ANNOTATION),
                                   to_annotation(found.pod), document.where))
    if not edits:
        raise InputError("manifest", f"{source}: no pod in the input")
    return apply_edits(text, edits)


def _template(manifest: Mapping[str, object], kind: str, where: str) -> PodSource:
    metadata = _mapping(manifest.get("metadata"), where, "metadata")
    name, namespace = identity(metadata, where)
    path = TEMPLATES[kind]
    template = _mapping(_get(manifest, path), where, ".".join(map(str, path)))
    prefix = ".".join(map(str, path)) + ".spec"
    spec = _mapping(template.get("spec"), where, prefix)
    pod = pod_from_spec(spec, where, prefix + ".", uid=derived_uid(namespace, name), name=name,
                        namespace=namespace)
    copies_path = _COPIES[kind]
    copies = 1 if copies_path is None else _get(manifest, copies_path)
    if copies is None:
        copies = 1
    if isinstance(copies, bool) or not isinstance(copies, int) or not 0 <= copies <= MAX_POD_COPIES:
        field = ".".join(map(str, copies_path or ()))
        raise InputError("manifest", f"{where}: {field} must be a non-negative integer up to "
                                     f"{MAX_POD_COPIES} (the pods one node can run), not {quote(copies)}")
    return PodSource(path, pod, copies)


def _get(manifest: Mapping[str, object], path: Path) -> object:
    value: object = manifest
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _mapping(value: object, where: str, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise InputError("manifest", f"{where}: {what} must be a mapping, not {type(value).__name__}")
    return value
