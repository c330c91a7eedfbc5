"""`nri-podlevel annotate`: the annotation it writes reads back as the same pod the manifest describes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from podlevel.podspec.manifest import SHAPE_ANNOTATION, from_annotation, load_pods
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
        ("kind: Deployment\nmetadata: {name: d}\n", "manifest kind"),
        (
            "kind: Pod\nmetadata: {name: p}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: 2x}}}]}\n",
            "quantity",
        ),
    ],
    ids=["no-metadata", "not-a-pod", "bad-quantity"],
)
def test_bad_manifest_exits_2_naming_the_rule(manifest: str, rule: str) -> None:
    result = _annotate("-", stdin=manifest)
    assert result.returncode == 2
    assert rule in result.stderr
    assert result.stdout == ""
