"""`nri-podlevel explain NAMESPACE/NAME [--json]`: why the running plugin gave a pod what it got, or refused
it.

The plugin keeps its last decisions (per pod the latest, up to 256 pods) with the node state each was made
on, and replays admission on that state: the admission path, the topology manager scope and policy, what
each NUMA node had free, each merge with every resource provider's hints (CPU manager, memory manager), the
merged hint and whether the policy admitted it; then the decision, or the rule that refused the pod with its
numbers. `--json` prints the endpoint's `/debug/explain` answer as it is (its shape is
`podlevel.report.schema`'s `ExplainDocument`).

Exit status: 0 with an explanation, 1 when the plugin keeps no decision about the pod, 2 on bad input or when
the plugin does not answer (explanations live in the running plugin only).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, cast

from podlevel.cli.endpoint import BadInput, Unreachable, add_source_arguments, fetch
from podlevel.engine.cfs import quota_text
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.limits import check_dns1123_label, check_dns1123_subdomain, quote
from podlevel.engine.quantity import format_amount, format_bytes
from podlevel.report.schema import ExplainDocument, ExplainMissingDocument, HintDocument, ProviderDocument

PROVIDER_NAMES = {"cpu": "CPU manager", "memory": "memory manager"}


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "explain", help="why the plugin gave a pod what it got, or refused it", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pod", metavar="NAMESPACE/NAME")
    add_source_arguments(parser, local=False)
    parser.add_argument("--json", action="store_true", help="print the endpoint's JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    namespace, sep, name = args.pod.partition("/")
    if not sep or not namespace or not name:
        print(f"nri-podlevel explain: {quote(args.pod)} is not NAMESPACE/NAME", file=sys.stderr)
        return 2
    try:
        check_dns1123_label(namespace, "NAMESPACE")
        check_dns1123_subdomain(name, "NAME")
        status, answer = fetch(args.address, "/debug/explain", pod=args.pod)
    except (BadInput, Unreachable, InputError) as err:
        print(f"nri-podlevel explain: {err}", file=sys.stderr)
        return 2
    if status != 200:
        missing = cast(ExplainMissingDocument, answer)
        refusal = missing.get("refusal")
        refused = f"; it was refused: {refusal}" if refusal else ""
        print(f"nri-podlevel explain: {missing.get('error')}{refused}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if args.json else "\n".join(render(cast(ExplainDocument, answer))))
    return 0


def render(answer: ExplainDocument) -> list[str]:
    pod = answer["pod"]
    outcome = "admitted" if answer["admitted"] else "refused"
    lines = [
        f"{pod['namespace']}/{pod['name']} (uid {pod['uid']}): {outcome}",
        f"  path: {answer['path']}; topology manager scope {answer['scope']}, "
        f"policy {answer['topology_policy']}"
        + (f"; confined to CPUs {answer['within']} (taken back after a restart)" if answer["within"] else ""),
        "  free before the decision:",
    ]
    for numa in answer["free"]:
        memory = ", ".join(f"{name} {format_bytes(size)}" for name, size in numa["memory"].items())
        cpus = numa["cpus"] or "none"
        lines.append(f"    NUMA node {numa['node']}: CPUs {cpus} ({_count(numa['cpus'])})"
                     + (f", {memory}" if memory else ""))
    if not answer["alignments"]:
        lines.append("  no merge: the topology policy none places without NUMA hints")
    for alignment in answer["alignments"]:
        what = f"container {alignment['container']}" if alignment["container"] else "the pod"
        requested = alignment["requested"].items()
        asked = ", ".join(f"{k}={format_amount(k, v)}" for k, v in requested) or "nothing"
        lines.append(f"  merge for {what}, requested {asked}:")
        for provider, hints in alignment["hints"].items():
            lines.append(f"    {PROVIDER_NAMES.get(provider, provider)}: {_provider(hints)}")
        verdict = "admitted" if alignment["admitted"] else "not admitted"
        lines.append(f"    merged: {_hint(alignment['merged'])} -> {verdict} by {answer['topology_policy']}")
    error = answer["error"]
    if error is not None:
        lines.append(f"  refused by {error['type']}: {error['message']}")
    decision = answer["decision"]
    if decision is not None:
        bubble = decision["bubble"]
        held = f" bubble cpus {bubble['cpus']} mems {bubble['mems']}" if bubble else ""
        lines.append("  decision:" + held)
        for c in decision["containers"]:
            lines.append(f"    {c['name']}: {c['assignment']} cpus {c['cpus'] or '-'} mems {c['mems']} "
                         f"quota {quota_text(c['cpu_quota_us'])}")
    refusal = answer["refusal"]
    if refusal and (error is None or refusal != f"{error['type']}: {error['message']}"):
        lines.append(f"  the runtime was answered: {refusal}")
    return lines


def _count(cpus: str) -> str:
    total = len(CPUSet.parse(cpus))
    return f"{total} CPU{'s' if total != 1 else ''}"


def _provider(hints: ProviderDocument | None) -> str:
    if hints is None:
        return "no preference"
    parts = []
    for resource, listed in hints.items():
        if listed is None:
            parts.append(f"{resource} no preference")
        elif not listed:
            parts.append(f"{resource} cannot be placed")
        else:
            parts.append(f"{resource} " + ", ".join(_hint(h) for h in listed))
    return "; ".join(parts)


def _hint(hint: HintDocument) -> str:
    nodes = hint["numa_nodes"]
    plural = "s" if nodes is not None and len(nodes) > 1 else ""
    where = "any node" if nodes is None else f"node{plural} {','.join(map(str, nodes))}"
    return where + (" (preferred)" if hint["preferred"] else "")
