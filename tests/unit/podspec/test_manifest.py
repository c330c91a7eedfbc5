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
