"""Pods wherever a manifest holds them: Pods, workload templates and their copies, Lists, multi-document
files; and the annotation written into the text with nothing else changed."""

from __future__ import annotations

import json

import pytest
import yaml

from podlevel.engine.errors import InputError
from podlevel.podspec.manifest import SHAPE_ANNOTATION, derived_uid, from_annotation, to_annotation
from podlevel.podspec.workloads import TEMPLATES, annotate, load_pods
from support.builders import EXAMPLES

TEMPLATE_BODY = """\
    metadata:
      labels: {app: shop}
    spec:
      resources:
        limits: {cpu: "2", memory: 1Gi}
      initContainers:
      - name: proxy
        restartPolicy: Always
      containers:
      - name: app
        resources:
          limits: {cpu: "1", memory: 512Mi}
"""


def workload(kind: str, *, copies: str = "") -> str:
    """A `kind` workload named `shop` in namespace `team` whose template is TEMPLATE_BODY."""
    head = f"apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: shop\n  namespace: team\nspec:\n"
    if kind == "CronJob":
        body = "".join(f"    {line}\n" for line in TEMPLATE_BODY.splitlines())
        return head + f"  schedule: '@hourly'\n  jobTemplate:\n    spec:\n{copies}      template:\n" + body
    return head + copies + "  template:\n" + TEMPLATE_BODY


def template_of(document: dict[str, object], kind: str) -> dict[str, object]:
    node: object = document
    for key in TEMPLATES[kind]:
        assert isinstance(node, dict)
        node = node[key]
    assert isinstance(node, dict)
    return node


def test_all_documentation_examples_load() -> None:
    names = sorted(p.name for f in EXAMPLES.glob("*.yaml") for p in load_pods(f.read_text(), str(f)))
    assert {"pod-scope-mixed", "empty-shared-pool", "container-scope-mixed"} <= set(names)


def test_multi_document_yaml_keeps_order_and_skips_empty_documents() -> None:
    text = """
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: team}
spec: {containers: [{name: c}]}
---
---
apiVersion: v1
kind: Pod
metadata: {name: a, uid: 1234-abcd}
spec: {containers: [{name: c}]}
"""
    first, second = load_pods(text)
    assert (first.name, first.namespace, first.uid) == ("b", "team", derived_uid("team", "b"))
    assert (second.name, second.namespace, second.uid) == ("a", "default", "1234-abcd")
    assert first.resources is None


def test_yaml_syntax_error_and_empty_input() -> None:
    with pytest.raises(InputError) as caught:
        load_pods("kind: Pod\n  bad: [", "broken.yaml")
    assert caught.value.rule == "yaml" and "broken.yaml" in caught.value.message
    with pytest.raises(InputError) as caught:
        load_pods("---\n", "empty.yaml")
    assert caught.value.rule == "manifest"


def test_errors_name_the_document_of_a_multi_document_file() -> None:
    text = "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {}"
    with pytest.raises(InputError) as caught:
        load_pods(text, "two.yaml")
    assert caught.value.message.startswith("two.yaml document 2: metadata.name")


@pytest.mark.parametrize(
    ("kind", "copies", "expected"),
    [
        ("Deployment", "  replicas: 3\n", 3),
        ("Deployment", "", 1),
        ("ReplicaSet", "  replicas: 2\n", 2),
        ("StatefulSet", "  replicas: 0\n", 0),
        ("DaemonSet", "", 1),
        ("Job", "  parallelism: 2\n", 2),
        ("Job", "  completions: 5\n", 1),
        ("CronJob", "      parallelism: 4\n", 4),
    ],
)
def test_a_workload_is_the_copies_its_controller_runs_at_once(kind: str, copies: str, expected: int) -> None:
    pods = load_pods(workload(kind, copies=copies), "w.yaml")
    assert [p.name for p in pods] == [f"shop-{i}" for i in range(expected)]
    assert {p.namespace for p in pods} <= {"team"}
    assert len({p.uid for p in pods}) == expected
    for pod in pods:
        assert pod.uid == derived_uid("team", pod.name)
        assert [c.name for c in pod.init_containers + pod.containers] == ["proxy", "app"]
        assert pod.resources is not None and pod.resources.limits["cpu"] == 2000


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_annotate_sets_the_shape_on_the_template_of_every_workload_kind(kind: str) -> None:
    text = workload(kind)
    out = annotate(text, "w.yaml")
    [document] = yaml.safe_load_all(out)
    metadata = template_of(document, kind)["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["labels"] == {"app": "shop"}
    [pod] = load_pods(workload("DaemonSet"))
    shaped = from_annotation(metadata["annotations"][SHAPE_ANNOTATION], name=pod.name, namespace="team")
    assert shaped == pod
    assert "annotations" not in document["metadata"], "the workload's own metadata is left alone"
    indent = "    " if kind == "CronJob" else ""
    assert _inserted_lines(text, out) == [
        f"{indent}      annotations:", f"{indent}        {SHAPE_ANNOTATION}: '{to_shape(out, kind)}'",
    ]


def to_shape(text: str, kind: str) -> str:
    [document] = yaml.safe_load_all(text)
    value: str = template_of(document, kind)["metadata"]["annotations"][SHAPE_ANNOTATION]  # type: ignore[index]
    return value


def _inserted_lines(before: str, after: str) -> list[str]:
    """The lines of `after` that are not in `before`, when `after` only adds lines."""
    old, new = before.splitlines(), after.splitlines()
    added = [line for line in new if line not in old]
    assert [line for line in new if line in old] == old, "every original line is kept, in order"
    return added


def test_annotate_keeps_comments_order_quoting_and_indentation() -> None:
    text = """\
# shop: the storefront.
apiVersion: apps/v1
kind: Deployment   # trailing comment
metadata:
  name: shop
spec:
  replicas: 2
  template:
    metadata:
      # the template's own annotations come first
      annotations:
        team.example.com/owner: "shop"   # quoted, kept quoted
      labels:
        app: shop
    spec:
      resources: {limits: {cpu: '2', memory: 1Gi}}
      containers:
        - name: app          # indented sequence
          image: "registry.example.com/shop:1.0"
"""
    out = annotate(text, "shop.yaml")
    value = to_shape(out, "Deployment")
    assert _inserted_lines(text, out) == [f"        {SHAPE_ANNOTATION}: '{value}'"]
    assert out.index(SHAPE_ANNOTATION) < out.index("team.example.com/owner")


def test_annotate_replaces_a_stale_value_in_place_whatever_its_style() -> None:
    text = (
        "kind: Pod\nmetadata:\n  name: p\n  annotations:\n    a: b\n"
        f"    {SHAPE_ANNOTATION}: |\n      forged\n    z: y\n"
        "spec:\n  containers:\n  - name: c\n"
    )
    out = annotate(text)
    shape = f"    {SHAPE_ANNOTATION}: '{to_annotation_of(text)}'"
    assert out.splitlines()[4:7] == ["    a: b", shape, "    z: y"]
    assert out.splitlines()[7:] == text.splitlines()[8:]


def _value(text: str) -> str:
    value: str = yaml.safe_load(text)["metadata"]["annotations"][SHAPE_ANNOTATION]
    return value


def test_annotate_a_json_list_stays_json() -> None:
    items = [
        json.loads(json.dumps(yaml.safe_load(workload(kind)))) for kind in ("Deployment", "Job")
    ]
    items.append({"kind": "Pod", "metadata": {"name": "p", "annotations": {}},
                  "spec": {"containers": [{"name": "c"}]}})
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)
    out = annotate(text, "list.json")
    document = json.loads(out)
    for item, kind in zip(document["items"], ("Deployment", "Job"), strict=False):
        assert SHAPE_ANNOTATION in template_of(item, kind)["metadata"]["annotations"]  # type: ignore[operator]
    assert SHAPE_ANNOTATION in document["items"][2]["metadata"]["annotations"]
    assert [p.name for p in load_pods(out)] == ["shop-0", "shop-0", "p"]


def test_annotate_fills_an_empty_or_null_annotations_field() -> None:
    for empty in ("", " null", " ~", " {}"):
        text = (f"kind: Pod\nmetadata:\n  name: p\n  annotations:{empty}\n"
                "spec: {containers: [{name: c}]}\n")
        out = annotate(text)
        assert _value(out) == to_annotation_of(text)
        assert out.splitlines()[0:3] == text.splitlines()[0:3]


def to_annotation_of(text: str) -> str:
    [pod] = load_pods(text)
    return to_annotation(pod)


def test_list_items_and_multi_document_files_are_all_read() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- kind: Pod\n  metadata:\n    name: a\n  spec: {containers: [{name: c}]}\n"
        + "".join("  " + line + "\n" if i else "- " + line + "\n"
                  for i, line in enumerate(workload("StatefulSet", copies="  replicas: 2\n").splitlines()))
        + "---\n" + workload("DaemonSet")
    )
    assert [p.name for p in load_pods(text)] == ["a", "shop-0", "shop-1", "shop-0"]
    out = annotate(text)
    assert [p.name for p in load_pods(out)] == ["a", "shop-0", "shop-1", "shop-0"]
    assert len(_inserted_lines(text, out)) == 6, "two lines for the Pod and each template"
    assert out.count(SHAPE_ANNOTATION) == 3


@pytest.mark.parametrize(
    ("text", "rule", "where"),
    [
        ("kind: Service\nmetadata: {name: s}\n", "manifest kind", "kind is 'Service'"),
        ("kind: Deployment\nmetadata: {name: d}\n", "manifest", "spec.template must be a mapping"),
        ("kind: Deployment\nmetadata: {name: d}\n"
         "spec: {replicas: -1, template: {spec: {containers: [{name: c}]}}}",
         "manifest", "spec.replicas must be a non-negative integer"),
        ("kind: Job\nmetadata: {name: j}\nspec: {template: {spec: {containers: [{name: c, resources: "
         "{requests: {cpu: 2x}}}]}}}", "quantity", "spec.template.spec.containers[0].resources.requests.cpu"),
        ("kind: List\nitems: [{kind: List, items: []}]\n", "manifest kind", "items[0] is a List"),
        ("kind: List\nitems: {}\n", "manifest", "items of a List must be a list"),
    ],
    ids=["unknown-kind", "no-template", "negative-replicas", "bad-template-quantity", "nested-list",
         "bad-items"],
)
def test_bad_workloads_name_the_rule_and_field(text: str, rule: str, where: str) -> None:
    with pytest.raises(InputError) as caught:
        load_pods(text, "w.yaml")
    assert caught.value.rule == rule and where in caught.value.message
    with pytest.raises(InputError):
        annotate(text, "w.yaml")


def test_a_workload_is_held_to_the_pod_name_rules() -> None:
    """The same metadata rules as a Pod: a name or namespace the API server refuses is refused here too."""
    deployment = ("kind: Deployment\nmetadata: {name: Bad_Name}\nspec:\n  template:\n"
                  "    spec: {containers: [{name: c}]}\n")
    with pytest.raises(InputError, match=r"d\.yaml: metadata\.name: 'Bad_Name'") as refused:
        load_pods(deployment, "d.yaml")
    assert refused.value.rule == "DNS-1123 subdomain"
