"""The webhook's decision on AdmissionReview v1 documents for pods as the API server sends them: the JSON
Patch, applied with a JSON Patch library, gives exactly the annotation the spec implies and changes nothing
else; anything else is allowed unchanged with a note."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
import yaml

from podlevel.podspec import admission
from podlevel.podspec.admission import MAX_REVIEW_BYTES, NOTE_LIMIT, review
from podlevel.podspec.manifest import SHAPE_ANNOTATION, pod_from_manifest, to_annotation
from support.builders import EXAMPLES
from testbed.apiserver import create_request, with_api_defaults

FORGED = '{"containers":[{"name":"main-app","resources":{"limits":{"cpu":"64"}}}],"v":1}'


def example_pod(name: str = "pod-scope-mixed", *, generate: bool = True) -> dict[str, Any]:
    """A documentation example as the API server sends it: defaults applied, `generateName`, no name."""
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    if generate:
        manifest["metadata"]["generateName"] = manifest["metadata"].pop("name") + "-"
    return with_api_defaults(manifest)


def answer(
    request: dict[str, Any], required: tuple[str, ...] = ()
) -> tuple[dict[str, Any], admission.Answer]:
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    result = review(body.encode(), required)
    document = json.loads(result.body)
    assert document["apiVersion"] == "admission.k8s.io/v1" and document["kind"] == "AdmissionReview"
    assert document["response"]["allowed"] is True, "the webhook never denies"
    return document["response"], result


def patched(
    pod: dict[str, Any], required: tuple[str, ...] = ()
) -> tuple[dict[str, Any], admission.Answer]:
    """`pod` after the webhook's patch, applied as the API server applies it."""
    request = create_request(pod)
    response, result = answer(request, required)
    assert response["uid"] == request["uid"]
    if "patch" not in response:
        return pod, result
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"]))), result


def shape_of(pod: dict[str, Any]) -> str:
    named = copy.deepcopy(pod)
    named["metadata"].setdefault("name", "x")
    return to_annotation(pod_from_manifest(named))


@pytest.mark.parametrize("name", ["pod-scope-mixed", "empty-shared-pool", "container-scope-mixed"])
def test_a_pod_with_pod_level_resources_gets_its_shape_and_nothing_else(name: str) -> None:
    pod = example_pod(name)
    assert "name" not in pod["metadata"] and pod["spec"]["initContainers"]
    after, result = patched(pod)
    assert after["metadata"]["annotations"][SHAPE_ANNOTATION] == shape_of(pod)
    del after["metadata"]["annotations"][SHAPE_ANNOTATION]
    assert after == pod
    assert (result.action, result.note, result.pod) == ("set", None, f"default/{name}-*")


def test_a_pod_without_an_annotations_map_gets_one() -> None:
    pod = example_pod()
    del pod["metadata"]["annotations"]
    after, _ = patched(pod)
    assert after["metadata"]["annotations"] == {SHAPE_ANNOTATION: shape_of(pod)}


def test_a_forged_shape_is_replaced_by_the_one_the_spec_implies() -> None:
    pod = example_pod()
    pod["metadata"]["annotations"][SHAPE_ANNOTATION] = FORGED
    response, _ = answer(create_request(pod))
    operations = json.loads(base64.b64decode(response["patch"]))
    assert operations == [{"op": "replace", "path": "/metadata/annotations/nri-podlevel.io~1pod-shape",
                           "value": shape_of(pod)}]
    after, result = patched(pod)
    assert after["metadata"]["annotations"][SHAPE_ANNOTATION] == shape_of(pod) and result.action == "replaced"
    assert after["metadata"]["annotations"]["kubernetes.io/description"]


def test_a_shape_already_right_needs_no_patch() -> None:
    pod = example_pod()
    pod["metadata"]["annotations"][SHAPE_ANNOTATION] = shape_of(pod)
    response, result = answer(create_request(pod))
    assert "patch" not in response and result.action == "unchanged" and result.note is None


def test_a_pod_without_pod_level_resources_loses_a_forged_shape_and_is_otherwise_untouched() -> None:
    plain = with_api_defaults({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"},
                               "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    response, result = answer(create_request(plain))
    assert "patch" not in response and result.action == "unchanged"
    plain["metadata"]["annotations"] = {SHAPE_ANNOTATION: FORGED, "keep": "me"}
    after, result = patched(plain)
    assert after["metadata"]["annotations"] == {"keep": "me"} and result.action == "removed"


def test_a_spec_that_breaks_an_api_rule_gets_no_shape_and_a_note() -> None:
    pod = example_pod()
    pod["spec"]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}  # below the aggregate
    pod["metadata"]["annotations"][SHAPE_ANNOTATION] = FORGED
    after, result = patched(pod)
    assert SHAPE_ANNOTATION not in after["metadata"]["annotations"]
    assert result.action == "removed" and result.note is not None and "aggregate" in result.note


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda r: r.update(kind={"group": "apps", "version": "v1", "kind": "Deployment"}), "mutates Pods"),
        (lambda r: r.update(resource={"group": "", "version": "v1", "resource": "services"}), "mutates pods"),
        (lambda r: r.update(subResource="ephemeralcontainers"), "subresource"),
        (lambda r: r.update(operation="UPDATE"), "only at creation"),
        (lambda r: r.update(object=None), "not a Pod with a spec"),
        (lambda r: r["object"]["metadata"].update(annotations=["x"]), "annotations is not a mapping"),
    ],
    ids=["deployment", "service", "subresource", "update", "no-object", "annotations-list"],
)
def test_reviews_that_are_not_a_pod_create_are_allowed_unchanged(change: Any, reason: str) -> None:
    request = create_request(example_pod())
    change(request)
    response, result = answer(request)
    assert "patch" not in response and response["uid"] == request["uid"]
    assert result.action == "unchanged" and result.note is not None and reason in result.note


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionRev', "not JSON"),
        (b'[1, 2]', "not an AdmissionReview"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}', "v1beta1"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "uid"),
        (b"[" * 100_000, "not JSON"),
        (b" " * (MAX_REVIEW_BYTES + 1), "over the"),
    ],
    ids=["garbage", "truncated", "array", "v1beta1", "no-request", "no-uid", "deep", "oversized"],
)
def test_unreadable_bodies_get_a_clean_allow_and_a_bounded_note(body: bytes, reason: str) -> None:
    result = review(body)
    response = json.loads(result.body)["response"]
    assert response == {"uid": "", "allowed": True}
    assert result.note is not None and reason in result.note
    assert len(result.note) <= NOTE_LIMIT and "\n" not in result.note


def test_an_internal_error_allows_the_pod_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: object) -> str:
        raise RuntimeError("boom\n" + "x" * 1000)

    monkeypatch.setattr(admission, "to_annotation", broken)
    request = create_request(example_pod())
    response, result = answer(request)
    assert response == {"uid": request["uid"], "allowed": True}
    assert result.note is not None and result.note.startswith("internal error: RuntimeError: boom x")
    assert len(result.note) == NOTE_LIMIT


REQUIRED = admission.REQUIRED_PLUGINS_ANNOTATION


@pytest.mark.parametrize("metadata", [
    {}, {"annotations": {"team": "a"}}, {"annotations": {SHAPE_ANNOTATION: FORGED}},
    {"annotations": {REQUIRED: '["someone-else"]'}},
], ids=["no annotations", "other annotations", "a forged shape", "another requirement"])
def test_fail_closed_a_shaped_pod_requires_the_plugin_whatever_metadata_it_came_with(
    metadata: dict[str, Any],
) -> None:
    pod = example_pod()
    pod["metadata"] = {**pod["metadata"], **metadata}
    after, result = patched(pod, ("podlevel",))
    annotations = after["metadata"]["annotations"]
    assert json.loads(annotations[REQUIRED]) == ["podlevel"]
    assert yaml.safe_load(annotations[REQUIRED]) == ["podlevel"], "NRI reads the value as YAML"
    assert annotations[SHAPE_ANNOTATION] == shape_of(pod)
    assert annotations.get("team", "a") == "a"
    assert result.action is not admission.Action.REMOVED


def test_fail_closed_leaves_pods_without_a_shape_alone() -> None:
    pod = example_pod()
    del pod["spec"]["resources"]
    after, result = patched(pod, ("podlevel",))
    assert REQUIRED not in after["metadata"].get("annotations", {})
    assert result.action is admission.Action.UNCHANGED


def test_fail_closed_patches_nothing_when_both_annotations_are_already_right() -> None:
    pod = example_pod()
    pod["metadata"]["annotations"] = {SHAPE_ANNOTATION: shape_of(pod), REQUIRED: '["podlevel"]'}
    response, result = answer(create_request(pod), ("podlevel",))
    assert "patch" not in response and result.action is admission.Action.UNCHANGED
