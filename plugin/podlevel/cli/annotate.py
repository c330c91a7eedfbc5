"""`nri-podlevel annotate FILE...`: print the manifests with the pod-shape annotation set on every pod.

The runtime shows the plugin one container at a time and nothing of init containers it has not started
yet; the annotation carries the whole pod (`podspec.manifest.SHAPE_ANNOTATION`), which the plugin needs to
apply the kubelet's pod-level rules exactly. Pods, the pod templates of Deployments, StatefulSets,
DaemonSets, ReplicaSets, Jobs and CronJobs, the items of a `List`, in multi-document YAML or JSON: the
annotation goes on each Pod's metadata and each template's (`spec.template.metadata`; a CronJob's
`spec.jobTemplate.spec.template.metadata`), replacing a stale one. Nothing else of a file changes: comments,
key order, quoting and indentation stay as written. Typical use: `nri-podlevel annotate app.yaml | kubectl
apply -f -` (the admission webhook, `nri-podlevel webhook`, does the same for every pod a cluster creates).
The manifests are validated on the way (exit status 2 and the broken rule on bad input).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from podlevel.cli.simulate import read_inputs
from podlevel.engine.errors import InputError
from podlevel.podspec.workloads import annotate

DOCUMENT_START = "---"


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "annotate",
        help="add the pod-shape annotation the plugin reads to Pod and workload manifests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pods", nargs="+", metavar="FILE",
                        help="Pod, workload or List manifests, YAML or JSON ('-' reads stdin)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    texts: list[str] = []
    try:
        for _, source, text in read_inputs(args.pods):
            texts.append(annotate(text, source))
    except (InputError, OSError) as err:
        print(f"nri-podlevel annotate: {err}", file=sys.stderr)
        return 2
    for index, text in enumerate(texts):
        if index and not text.startswith(DOCUMENT_START):
            sys.stdout.write(DOCUMENT_START + "\n")  # the next file starts a document of its own
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
