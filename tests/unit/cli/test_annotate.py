"""`nri-podlevel annotate`: the annotation it writes reads back as the same pod the manifest describes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from podlevel.podspec.manifest import SHAPE_ANNOTATION, from_annotation
from podlevel.podspec.workloads import load_pods
from support.builders import EXAMPLES

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def _annotate(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "annotate", *args],
        input=stdin, capture_output=True, text=True, check=False,
    )


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_annotation_round_trips(example: Path) -> None:
    result = _annotate(str(example))
    assert result.returncode == 0, result.stderr
    (document,) = list(yaml.safe_load_all(result.stdout))
    (expected,) = load_pods(example.read_text())
    metadata = document["metadata"]
    shaped = from_annotation(metadata["annotations"][SHAPE_ANNOTATION], name=metadata["name"])
    assert shaped == expected
    assert metadata["annotations"]["kubernetes.io/description"], "existing annotations are kept"


def test_stale_annotation_is_replaced() -> None:
    manifest = (
        "kind: Pod\nmetadata: {name: p, annotations: {" + SHAPE_ANNOTATION + ": stale}}\n"
        "spec: {containers: [{name: c, image: busybox}]}\n"
    )
    result = _annotate("-", stdin=manifest)
    assert result.returncode == 0, result.stderr
    value = yaml.safe_load(result.stdout)["metadata"]["annotations"][SHAPE_ANNOTATION]
    assert from_annotation(value, name="p").containers[0].name == "c"


@pytest.mark.parametrize(
    ("manifest", "rule"),
    [
        ("kind: Pod\n", "metadata must be a mapping"),
        ("kind: Service\nmetadata: {name: s}\n", "manifest kind"),
        (
            "kind: Pod\nmetadata: {name: p}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: 2x}}}]}\n",
            "quantity",
        ),
    ],
    ids=["no-metadata", "no-pod-kind", "bad-quantity"],
)
def test_bad_manifest_exits_2_naming_the_rule(manifest: str, rule: str) -> None:
    result = _annotate("-", stdin=manifest)
    assert result.returncode == 2
    assert rule in result.stderr
    assert result.stdout == ""


def test_a_deployment_and_a_pod_in_two_files_come_out_as_one_stream(tmp_path: Path) -> None:
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(
        "# the storefront\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\nspec:\n"
        "  replicas: 2  # two copies\n  template:\n    metadata:\n      labels: {app: shop}\n    spec:\n"
        "      containers:\n      - name: app\n        image: busybox"  # no final newline
    )
    result = _annotate(str(deployment), str(EXAMPLES / "pod-scope-mixed.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(deployment.read_text().split("    metadata:")[0] + "    metadata:\n")
    assert "# two copies" in result.stdout and "\n---\n" in result.stdout
    shop, pod = yaml.safe_load_all(result.stdout)
    assert SHAPE_ANNOTATION in shop["spec"]["template"]["metadata"]["annotations"]
    assert SHAPE_ANNOTATION in pod["metadata"]["annotations"]
    assert [p.name for p in load_pods(result.stdout)] == ["shop-0", "shop-1", "pod-scope-mixed"]
