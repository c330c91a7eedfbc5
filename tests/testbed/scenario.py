"""A kubelet comparison scenario: node settings and the steps that put static pods on a node, in order.

Each scenario is a directory of `tests/kubelet-scenarios/` holding `scenario.yaml` and pod manifests:

    about: what it shows, one line
    quick: true                  # in the short form `make test` runs
    node:                        # KubeletConfiguration resource-manager keys, for both runs
      topologyManagerPolicy: restricted
    steps:                       # default: `add` every other .yaml file of the directory, in name order
    - add: pod-a.yaml            # a path relative to the directory (the documentation's pods are reused)
    - delete: pod-a              # the manifest's metadata.name
    - record: after-delete       # a record of the node at this point, besides the one at the end
    - restart-kubelet
    - watch-writes: steady      # writes to the pods' cgroup files over three kubelet sync periods

A manifest runs as a node's images let it: every container runs the test bed's busybox (`sleep`, or `true`
for a standard init container) with `imagePullPolicy: Never`, the pod on the host network (there is no
CNI in the guest) and no termination grace period; resources, names and kinds are the manifest's own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from testbed import CHECKOUT
from testbed.images import BUSYBOX_IMAGE

SCENARIOS: Final = CHECKOUT / "tests" / "kubelet-scenarios"
STEP_KINDS: Final = ("add", "delete", "record", "restart-kubelet", "watch-writes")


class ScenarioError(ValueError):
    """A scenario directory that cannot be run as written."""


@dataclass(frozen=True)
class Step:
    kind: str
    argument: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    node: Mapping[str, Any]
    steps: Sequence[Step]
    manifests: Mapping[str, str] = field(default_factory=dict)
    """pod name -> manifest text as the node runs it (see the module docstring)."""
    quick: bool = False


def static_pod(text: str, source: str) -> tuple[str, str]:
    """(pod name, manifest text) with busybox images, no pulls and the host network."""
    manifest = yaml.safe_load(text)
    if not isinstance(manifest, dict) or manifest.get("kind") != "Pod":
        raise ScenarioError(f"{source}: not one Pod manifest")
    pod = copy.deepcopy(manifest)
    metadata = pod.setdefault("metadata", {})
    metadata["namespace"] = "default"
    spec = pod.setdefault("spec", {})
    spec["hostNetwork"] = True
    spec["terminationGracePeriodSeconds"] = 0  # `sleep` as PID 1 ignores SIGTERM: no 30 s wait per delete
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            standard_init = kind == "initContainers" and container.get("restartPolicy") != "Always"
            container["image"] = BUSYBOX_IMAGE
            container["imagePullPolicy"] = "Never"
            container["command"] = ["true"] if standard_init else ["sleep", "86400"]
    return str(metadata["name"]), yaml.safe_dump(pod, sort_keys=False)


def load(directory: Path) -> Scenario:
    try:
        spec = yaml.safe_load((directory / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{directory}/scenario.yaml: {exc}") from exc
    raw_steps = spec.get("steps") or [{"add": p.name} for p in sorted(directory.glob("*.yaml"))
                                      if p.name != "scenario.yaml"]
    steps: list[Step] = []
    manifests: dict[str, str] = {}
    for raw in raw_steps:
        kind, argument = (raw, "") if isinstance(raw, str) else next(iter(raw.items()))
        if kind not in STEP_KINDS:
            raise ScenarioError(f"{directory.name}: unknown step {kind!r} (steps: {', '.join(STEP_KINDS)})")
        if kind == "add":
            path = (directory / str(argument)).resolve()
            name, text = static_pod(path.read_text(), str(path))
            manifests[name] = text
            argument = name
        steps.append(Step(kind, str(argument)))
    return Scenario(directory.name, str(spec.get("about", "")), dict(spec.get("node") or {}), steps,
                    manifests, bool(spec.get("quick", False)))


def load_all(names: Sequence[str] = (), *, quick: bool = False) -> list[Scenario]:
    """Every scenario of SCENARIOS (or those named), in name order; with `quick`, the short form's."""
    found = [load(d) for d in sorted(SCENARIOS.iterdir()) if (d / "scenario.yaml").exists()]
    if names:
        unknown = sorted(set(names) - {s.name for s in found})
        if unknown:
            raise ScenarioError(f"no scenario named {', '.join(unknown)} in {SCENARIOS}")
        found = [s for s in found if s.name in names]
    return [s for s in found if s.quick] if quick else found
