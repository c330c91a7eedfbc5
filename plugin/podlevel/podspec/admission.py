"""The admission webhook's decision: an AdmissionReview v1 request in, its response out. Pure, no I/O.

Every Pod created with pod-level `.spec.resources` gets the pod-shape annotation (`SHAPE_ANNOTATION`),
always recomputed from its spec, so a pod cannot keep a forged value; a pod without pod-level resources (or
one whose spec breaks an API rule, which the API server refuses anyway) loses a value it was created with,
so the plugin never manages a pod on a shape it did not derive. The change is a JSON Patch (RFC 6902) on
`/metadata/annotations`.

Fail closed, where the runtime can enforce it: given `required_plugins` (the plugin's NRI names), a pod that
gets a shape also gets NRI's required-plugins annotation (`REQUIRED_PLUGINS_ANNOTATION`), so a runtime whose
NRI default validator is on refuses to create its containers while that plugin is not running, instead of
running them unplaced.

The webhook never denies: `allowed` is always true. Whatever cannot be answered properly (a body that is
not an AdmissionReview, a request for something other than a Pod CREATE, an internal error) is answered
with the pod unchanged and a `note` for the log; the API server then creates the pod as it was sent, and
the plugin runs it in the node shared pool like any unannotated pod.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from podlevel.engine.errors import InputError
from podlevel.podspec.documents import load_json
from podlevel.podspec.manifest import SHAPE_ANNOTATION, derived_uid, pod_from_spec, to_annotation

API_VERSION: Final = "admission.k8s.io/v1"
MAX_REVIEW_BYTES: Final = 3 * 1024 * 1024
"""The API server's own limit on a request body; a larger review is not read."""
NOTE_LIMIT: Final = 300
"""Characters of a note kept for the log: one bounded line whatever the input."""

REQUIRED_PLUGINS_ANNOTATION: Final = "required-plugins.noderesource.dev/pod"
"""NRI's annotation (`pkg/plugin`, for every container of the pod): a YAML list of plugin names, each
`name` or `index-name`, that must have processed a container for the default validator to let it be
created."""

_ANNOTATIONS: Final = "/metadata/annotations"


def _pointer(key: str) -> str:
    return f"{_ANNOTATIONS}/{key.replace('~', '~0').replace('/', '~1')}"


_SHAPE_POINTER: Final = _pointer(SHAPE_ANNOTATION)


class Action(StrEnum):
    """What the answer does to the pod-shape annotation."""

    SET = "set"
    REPLACED = "replaced"
    REMOVED = "removed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class Answer:
    """The response document, what was done (for the log), and why the pod was left alone, if it was."""

    body: bytes
    pod: str
    """`namespace/name` (or `namespace/generateName*`) of the pod, "-" when the review names none."""
    action: Action
    note: str | None = None


def review(body: bytes, required_plugins: tuple[str, ...] = ()) -> Answer:
    """The response to one AdmissionReview request body; a shaped pod also requires `required_plugins`."""
    uid, pod = "", "-"
    try:
        request = _request(body)
        uid = _text(request.get("uid"), "request.uid")
        pod = _line(_pod_title(request))
        patch, action, note = _patch(request, required_plugins)
    except _NotAPod as reason:
        return unchanged(uid, pod, str(reason))
    except Exception as err:  # the webhook must not deny a pod, whatever went wrong here
        return unchanged(uid, pod, f"internal error: {type(err).__name__}: {err}")
    return Answer(_response(uid, patch), pod, action, None if note is None else _line(note))


def unchanged(uid: str, pod: str, note: str) -> Answer:
    """Allow the pod as it was sent; `note` says why."""
    return Answer(_response(uid, []), _line(pod), Action.UNCHANGED, _line(note))


def unreadable(note: str) -> Answer:
    """Allow a review that could not even be read (so names no request and no pod); `note` says why."""
    return unchanged("", "-", note)


def _line(text: str) -> str:
    """`text` as one line of at most NOTE_LIMIT characters, whatever the input held."""
    line = " ".join(text.split())
    return line if len(line) <= NOTE_LIMIT else line[: NOTE_LIMIT - 3] + "..."


class _NotAPod(Exception):
    """A review this webhook has nothing to do with, or cannot read."""


def _request(body: bytes) -> Mapping[str, object]:
    if len(body) > MAX_REVIEW_BYTES:
        raise _NotAPod(f"review of {len(body)} bytes is over the {MAX_REVIEW_BYTES}-byte limit")
    try:
        document = load_json(body.decode("utf-8"), "review")
    except UnicodeDecodeError as err:
        raise _NotAPod(f"body is not UTF-8: {err}") from None
    except InputError as err:
        raise _NotAPod(f"body is not JSON: {err.message}") from None
    if not isinstance(document, dict) or document.get("kind") != "AdmissionReview":
        raise _NotAPod("body is not an AdmissionReview")
    if document.get("apiVersion") != API_VERSION:
        raise _NotAPod(f"apiVersion is {document.get('apiVersion')!r}, this webhook speaks {API_VERSION}")
    request = document.get("request")
    if not isinstance(request, dict):
        raise _NotAPod("AdmissionReview has no request")
    return request


def _pod_title(request: Mapping[str, object]) -> str:
    obj = request.get("object")
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    namespace = request.get("namespace") or metadata.get("namespace") or "default"
    name = request.get("name") or metadata.get("name")
    if not name and metadata.get("generateName"):
        name = f"{metadata['generateName']}*"
    return f"{namespace}/{name or '-'}"


def _patch(
    request: Mapping[str, object], required_plugins: tuple[str, ...] = ()
) -> tuple[list[dict[str, object]], Action, str | None]:
    """(JSON Patch, action, note): the annotations the pod must carry, and nothing else."""
    kind = request.get("kind")
    resource = request.get("resource")
    if not (isinstance(kind, dict) and kind.get("group") == "" and kind.get("kind") == "Pod"):
        raise _NotAPod(f"kind is {kind!r}, this webhook mutates Pods")
    if isinstance(resource, dict) and resource.get("resource") != "pods":
        raise _NotAPod(f"resource is {resource!r}, this webhook mutates pods")
    if request.get("subResource"):
        raise _NotAPod(f"subresource {request['subResource']!r} is not the pod itself")
    if request.get("operation") != "CREATE":
        raise _NotAPod(f"operation {request.get('operation')!r}: the runtime reads the annotation only at "
                       "creation")
    obj = request.get("object")
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        raise _NotAPod("the review's object is not a Pod with a spec")
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise _NotAPod("the Pod's metadata is not a mapping")
    annotations = metadata.get("annotations")
    if annotations is not None and not isinstance(annotations, dict):
        raise _NotAPod("the Pod's metadata.annotations is not a mapping")
    present = annotations is not None and SHAPE_ANNOTATION in annotations
    spec = obj["spec"]
    shape: str | None = None
    note: str | None = None
    try:
        shape = _shape(spec, _pod_title(request)) if spec.get("resources") is not None else None
    except InputError as err:
        note = f"spec breaks an API rule, no pod shape: {err}"
    if shape is None:
        if not present:
            return [], Action.UNCHANGED, note
        return [{"op": "remove", "path": _SHAPE_POINTER}], Action.REMOVED, note
    wanted = {SHAPE_ANNOTATION: shape}
    if required_plugins:
        wanted[REQUIRED_PLUGINS_ANNOTATION] = json.dumps(list(required_plugins))
    if "metadata" not in obj:
        return [{"op": "add", "path": "/metadata", "value": {"annotations": wanted}}], Action.SET, None
    if annotations is None:
        return [{"op": "add", "path": _ANNOTATIONS, "value": wanted}], Action.SET, None
    # An `add` of a member that exists replaces its value (RFC 6902 4.1).
    patch: list[dict[str, object]] = [{"op": "add", "path": _pointer(key), "value": value}
                                      for key, value in wanted.items() if annotations.get(key) != value]
    if not present:
        return patch, Action.SET, None
    if annotations[SHAPE_ANNOTATION] == shape:
        return patch, Action.UNCHANGED, None
    patch[0]["op"] = "replace"
    return patch, Action.REPLACED, None


def _shape(spec: Mapping[str, object], title: str) -> str:
    namespace, _, name = title.partition("/")
    uid = derived_uid(namespace, name)
    pod = pod_from_spec(spec, title, "spec.", uid=uid, name=name, namespace=namespace)
    return to_annotation(pod)


def _response(uid: str, patch: list[dict[str, object]]) -> bytes:
    response: dict[str, object] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return json.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}).encode()


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _NotAPod(f"{field} is missing")
    return value
