"""Pod manifests and the pod-shape annotation -> engine `Pod`, and the API rules they must keep."""

from __future__ import annotations

import pytest

from podlevel.engine.errors import InputError
from podlevel.engine.pod import ContainerKind, QOSClass
from podlevel.podspec.manifest import (
    SHAPE_ANNOTATION,
    derived_uid,
    from_annotation,
    pod_from_manifest,
    to_annotation,
)
from podlevel.podspec.workloads import load_pods
from support.builders import EXAMPLES, GI, example


def manifest(spec: dict[str, object], **metadata: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **metadata}, "spec": spec}


def guaranteed_spec(cpu: object, memory: object) -> dict[str, object]:
    """A manifest's `resources` with requests equal to limits, in the manifest's own quantities."""
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def test_the_documentation_pod_scope_mixed_example() -> None:
    pod = example("pod-scope-mixed")
    assert pod.name == "pod-scope-mixed" and pod.namespace == "default"
    assert pod.resources is not None
    assert dict(pod.resources.requests) == {"cpu": 4000, "memory": 4 * GI}
    assert [(c.name, c.kind) for c in pod.init_containers] == [
        ("metrics-sidecar", ContainerKind.SIDECAR),
        ("logging-sidecar", ContainerKind.SIDECAR),
    ]
    [main] = pod.containers
    assert main.name == "main-app" and main.kind is ContainerKind.APP
    assert main.resources.is_equivalent_guaranteed()
    assert dict(main.resources.limits) == {"cpu": 2000, "memory": 2 * GI}
    assert pod.qos_class() is QOSClass.GUARANTEED


def test_derived_uid_is_stable_and_distinct() -> None:
    assert derived_uid("default", "x") == derived_uid("default", "x")
    assert derived_uid("default", "x") != derived_uid("other", "x")
    assert len(derived_uid("default", "x")) == 36


def test_limits_only_defaults_the_request_to_the_limit() -> None:
    pod = pod_from_manifest(
        manifest({"containers": [{"name": "c", "resources": {"limits": {"cpu": "1500m"}}}]})
    )
    assert pod.containers[0].resources.request("cpu") == 1500


def test_fractional_cpu_on_a_guaranteed_container_is_accepted() -> None:
    pod = pod_from_manifest(
        manifest(
            {
                "resources": guaranteed_spec("4", "4Gi"),
                "containers": [{"name": "c", "resources": guaranteed_spec("1.5", "1Gi")}],
            }
        )
    )
    assert pod.containers[0].resources.request("cpu") == 1500


def test_numbers_from_yaml_are_quantities() -> None:
    pod = pod_from_manifest(
        manifest({"containers": [{"name": "c", "resources": {"requests": {"cpu": 0.5, "memory": 1048576}}}]})
    )
    assert dict(pod.containers[0].resources.requests) == {"cpu": 500, "memory": 2**20}


def test_hugepage_names_are_normalised_and_other_resources_dropped() -> None:
    pod = pod_from_manifest(
        manifest(
            {
                "containers": [
                    {
                        "name": "c",
                        "resources": {
                            "requests": {"hugepages-2048Ki": "4Mi", "ephemeral-storage": "1Gi"},
                            "limits": {"hugepages-2048Ki": "4Mi", "example.com/nic": 1},
                        },
                    }
                ]
            }
        )
    )
    assert dict(pod.containers[0].resources.requests) == {"hugepages-2Mi": 4 * 2**20}
    assert dict(pod.containers[0].resources.limits) == {"hugepages-2Mi": 4 * 2**20}


def test_init_container_kinds() -> None:
    pod = pod_from_manifest(
        manifest(
            {
                "initContainers": [{"name": "i"}, {"name": "s", "restartPolicy": "Always"}],
                "containers": [{"name": "c"}],
            }
        )
    )
    assert [c.kind for c in pod.all_containers] == [
        ContainerKind.INIT,
        ContainerKind.SIDECAR,
        ContainerKind.APP,
    ]


@pytest.mark.parametrize(
    ("spec", "rule", "path"),
    [
        pytest.param(
            {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]},
            "requests <= limits",
            "spec.containers[0].resources.requests.cpu",
            id="container-request-above-limit",
        ),
        pytest.param(
            {
                "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
                "containers": [{"name": "c"}],
            },
            "requests <= limits",
            "spec.resources.requests.memory",
            id="pod-request-above-limit",
        ),
        pytest.param(
            {
                "resources": guaranteed_spec("4", "4Gi"),
                "initContainers": [
                    {"name": "s", "restartPolicy": "Always", "resources": guaranteed_spec("2", "1Gi")}
                ],
                "containers": [{"name": "a", "resources": guaranteed_spec("3", "1Gi")}],
            },
            "pod budget >= aggregate container requests",
            "spec.resources.requests.cpu",
            id="budget-below-sum-of-sidecar-and-app",
        ),
        pytest.param(
            {
                "resources": guaranteed_spec("2", "4Gi"),
                "containers": [
                    {"name": "a", "resources": {"limits": {"cpu": "3"}, "requests": {"cpu": "1"}}}
                ],
            },
            "container limit <= pod limit",
            "spec.containers[0].resources.limits.cpu",
            id="container-limit-above-pod-limit",
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2 cores"}}}]},
            "quantity",
            "spec.containers[0].resources.requests.cpu",
            id="unknown-quantity-syntax",
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"requests": {"memory": True}}}]},
            "quantity",
            "spec.containers[0].resources.requests.memory",
            id="boolean-quantity",
        ),
        pytest.param(
            {"containers": {"name": "c"}},
            "manifest",
            "spec.containers must be a list",
            id="containers-not-a-list",
        ),
        pytest.param({"containers": []}, "manifest", "spec.containers must list", id="no-containers"),
        pytest.param(
            {"containers": [{"image": "x"}]}, "manifest", "spec.containers[0].name", id="missing-name"
        ),
        pytest.param(
            {"initContainers": [{"name": "x"}], "containers": [{"name": "x"}]},
            "unique container names",
            "spec.containers[0].name",
            id="duplicate-name-across-init-and-app",
        ),
        pytest.param(
            {"resources": {"requests": {"ephemeral-storage": "1Gi"}}, "containers": [{"name": "c"}]},
            "pod-level resources",
            "spec.resources.requests.ephemeral-storage",
            id="pod-level-unsupported-resource",
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"requests": ["1"]}}]},
            "manifest",
            "spec.containers[0].resources.requests must be a mapping",
            id="requests-not-a-mapping",
        ),
    ],
)
def test_bad_input_names_rule_and_field(spec: dict[str, object], rule: str, path: str) -> None:
    with pytest.raises(InputError) as caught:
        pod_from_manifest(manifest(spec), "pod.yaml")
    assert caught.value.rule == rule
    assert path in caught.value.message
    assert caught.value.message.startswith("pod.yaml: ")


def test_budget_rule_counts_init_containers_as_a_peak_not_a_sum() -> None:
    pod = pod_from_manifest(
        manifest(
            {
                "resources": guaranteed_spec("4", "4Gi"),
                "initContainers": [{"name": "i", "resources": guaranteed_spec("4", "4Gi")}],
                "containers": [{"name": "a", "resources": guaranteed_spec("3", "3Gi")}],
            }
        )
    )
    assert pod.aggregate_request("cpu") == 4000


def test_aggregate_request_adds_earlier_sidecars_to_a_later_init_container() -> None:
    pod = pod_from_manifest(
        manifest(
            {
                "initContainers": [
                    {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "i", "resources": {"requests": {"cpu": "3"}}},
                ],
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}],
            }
        )
    )
    assert pod.aggregate_request("cpu") == 4000


@pytest.mark.parametrize(
    ("document", "rule"),
    [
        ({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}}, "manifest kind"),
        (["not", "a", "mapping"], "manifest"),
        ({"kind": "Pod", "metadata": {"name": "p"}}, "manifest"),
        (
            {"kind": "Pod", "metadata": {"name": "p", "uid": 7}, "spec": {"containers": [{"name": "c"}]}},
            "manifest",
        ),
    ],
)
def test_bad_documents(document: object, rule: str) -> None:
    with pytest.raises(InputError) as caught:
        pod_from_manifest(document)
    assert caught.value.rule == rule


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_annotation_round_trip_of_the_examples(example: str) -> None:
    for pod in load_pods((EXAMPLES / example).read_text()):
        text = to_annotation(pod)
        assert "\n" not in text and " " not in text
        assert from_annotation(text, name=pod.name, namespace=pod.namespace) == pod
        assert from_annotation(text, name=pod.name, uid="real-uid").uid == "real-uid"


def test_annotation_keeps_exact_units_and_pods_without_budget() -> None:
    pod = pod_from_manifest(
        manifest(
            {
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"cpu": "250m", "memory": "1000"}}}
                ],
                "containers": [
                    {"name": "a", "resources": {"limits": {"cpu": "1.5", "hugepages-1Gi": "2Gi"}}}
                ],
            }
        )
    )
    back = from_annotation(to_annotation(pod), name="p")
    assert back == pod and back.resources is None
    assert back.init_containers[0].resources.requests["memory"] == 1000


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not JSON"),
        ('{"v": 2, "containers": [{"name": "a"}]}', "v is 2"),
        ('{"v": 1, "containers": [{"name": "a"}, {"name": "a"}]}', "containers[1].name"),
        ('{"v": 1, "containers": [{"name": "a", "resources": {"requests": {"cpu": "x"}}}]}', "requests.cpu"),
    ],
)
def test_bad_annotations(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        from_annotation(text, name="p", namespace="ns")
    assert fragment in caught.value.message
    assert SHAPE_ANNOTATION in caught.value.message


# -- the API server's limits ----------------------------------------------------------------------------


def shape(containers: str, resources: str = "") -> str:
    budget = f', "resources": {resources}' if resources else ""
    return f'{{"v": 1, "containers": {containers}{budget}}}'


@pytest.mark.parametrize(
    ("text", "rule", "fragment"),
    [
        (shape('[{"name": "\\ud800"}]'), "UTF-8", "containers[0].name holds '\\ud800'"),
        (shape('[{"name": "a", "resources": {"limits": {"cpu\\ud800": "1"}}}]'), "UTF-8", "key holds"),
        (shape('[{"name": "a", "resources": {"limits": {"cpu": "1e10000000"}}}]'), "quantity",
         "containers[0].resources.limits.cpu: '1e10000000' is above the maximum"),
        (shape('[{"name": "a", "resources": {"limits": {"memory": -1}}}]'), "quantity", "'-1' is negative"),
        (shape('[{"name": "a", "resources": {"limits": {"memory": "-1"}}}]'), "quantity", "'-1' is negative"),
        (shape('[{"name": "a", "resources": {"limits": {"cpu": NaN}}}]'), "json", "NaN is not a JSON number"),
        (shape('[{"name": "App"}]'), "DNS-1123 label", "containers[0].name: 'App'"),
        (shape('[{"name": "' + "a" * 64 + '"}]'), "DNS-1123 label", "at most 63 characters"),
        (shape('[{"name": "a", "resources": {"limits": {"a b": "1"}}}]'), "qualified name", "'a b'"),
        ("[" * 100_000 + "]" * 100_000, "json", "nested 100000 levels deep"),
        (shape('[{"name": "' + "a" * 300_000 + '"}]'), "annotation size", "above the 262144"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_annotations_beyond_the_api_servers_limits_are_refused_naming_the_rule(
    text: str, rule: str, fragment: str
) -> None:
    with pytest.raises(InputError) as caught:
        from_annotation(text, name="p", namespace="ns")
    assert caught.value.rule == rule and fragment in caught.value.message
    assert len(str(caught.value)) < 600
    str(caught.value).encode()


def test_a_number_is_a_quantity_as_its_text() -> None:
    numbers = '[{"name": "a", "resources": {"limits": {"cpu": 2, "memory": 1e9}}}]'
    texts = '[{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1e9"}}}]'
    as_number, as_text = from_annotation(shape(numbers), name="p"), from_annotation(shape(texts), name="p")
    assert as_number == as_text


@pytest.mark.parametrize(
    ("name", "namespace", "rule"),
    [("P", "ns", "DNS-1123 subdomain"), ("p" * 254, "ns", "DNS-1123 subdomain"),
     ("p", "n.s", "DNS-1123 label"), ("p", "\ud800", "DNS-1123 label")],
    ids=lambda v: str(v)[:10],
)
def test_the_sandbox_identity_is_held_to_the_api_servers_name_rules(
    name: str, namespace: str, rule: str
) -> None:
    with pytest.raises(InputError) as caught:
        from_annotation(shape('[{"name": "a"}]'), name=name, namespace=namespace)
    assert caught.value.rule == rule
    str(caught.value).encode()


@pytest.mark.parametrize(
    ("metadata", "rule"),
    [("{name: Web}", "DNS-1123 subdomain"), ("{name: web, namespace: Prod}", "DNS-1123 label"),
     ('{name: web, uid: "' + "u" * 200 + '"}', "manifest")],
)
def test_manifest_names_follow_the_api_servers_rules(metadata: str, rule: str) -> None:
    with pytest.raises(InputError) as caught:
        load_pods(f"kind: Pod\nmetadata: {metadata}\nspec: {{containers: [{{name: c}}]}}\n", "pod.yaml")
    assert caught.value.rule == rule


def test_a_nan_quantity_in_yaml_is_a_quantity_error() -> None:
    text = "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, resources: {limits: {cpu: .nan}}}]}"
    with pytest.raises(InputError) as caught:
        load_pods(text, "nan.yaml")
    assert caught.value.rule == "quantity" and "nan.yaml: spec.containers[0].resources.limits.cpu" in str(
        caught.value
    )
