"""`nri-podlevel annotate POD.yaml...`: print the manifests with the pod-shape annotation added.

The runtime shows the plugin one container at a time and nothing of init containers it has not started
yet; the annotation carries the whole pod (`podspec.manifest.SHAPE_ANNOTATION`), which the plugin needs to
apply the kubelet's pod-level rules exactly. Typical use: `nri-podlevel annotate pod.yaml | kubectl apply
-f -`, or the same step in a deployment pipeline or an admission webhook. The manifests are validated on
the way (exit status 2 and the broken rule on bad input).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from podlevel.cli.simulate import read_inputs
from podlevel.engine.errors import InputError
from podlevel.podspec.documents import load_yaml_all
from podlevel.podspec.manifest import SHAPE_ANNOTATION, pod_from_manifest, to_annotation


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "annotate",
        help="add the pod-shape annotation the plugin reads to Pod manifests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pods", nargs="+", metavar="POD.yaml", help="Pod manifests ('-' reads stdin)")
    parser.set_defaults(handler=run)


def annotate(text: str, source: str) -> list[dict[str, Any]]:
    """Every Pod document of `text` with the annotation set (replacing a stale one)."""
    documents = [d for d in load_yaml_all(text, source) if d is not None]
    annotated: list[dict[str, Any]] = []
    for index, document in enumerate(documents):
        pod = pod_from_manifest(document, source if len(documents) == 1 else f"{source} document {index + 1}")
        metadata = document.setdefault("metadata", {})
        annotations = metadata.get("annotations") or {}
        annotations[SHAPE_ANNOTATION] = to_annotation(pod)
        metadata["annotations"] = annotations
        annotated.append(document)
    if not annotated:
        raise InputError("manifest", f"{source}: no Pod manifest in the input")
    return annotated


def run(args: argparse.Namespace) -> int:
    documents: list[dict[str, Any]] = []
    try:
        for _, source, text in read_inputs(args.pods):
            documents.extend(annotate(text, source))
    except (InputError, OSError) as err:
        print(f"nri-podlevel annotate: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False))
    return 0
