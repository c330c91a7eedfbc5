"""A real kubelet v1.37 on the same static pods twice: its own managers, then the plugin.

    hack/kubelet-compare [--quick] [--json] [--topologies 2,4] [--flavours 2,2.4] [--scenario NAME]...
    hack/kubelet-compare --latency N      pod start latency instead (`testbed.start_latency`)

On the host it builds the kubelet (`hack/build-go-tools`), fetches containerd, and boots one cgroup-v2 guest
per topology and containerd flavour (`hack/vm-run`); inside, `guest` runs every scenario
(`testbed.scenario`) twice on one private containerd:

- **reference**: the kubelet's managers on (`cpuManagerPolicy: static`, `memoryManagerPolicy: Static`, the
  scenario's topology policy, scope and options, `reservedSystemCPUs`, `reservedMemory`, feature gates
  `PodLevelResources` and `PodLevelResourceManagers`), no plugin;
- **plugin**: the kubelet's managers off as README tells operators, `nri-podlevel run --config` with the
  reference's own KubeletConfiguration, and the static pods annotated by `nri-podlevel annotate`.

Each run ends (and each `record` step adds) a `testbed.node_record` of the node. The host compares the two
field by field, prints each difference and, with `--json`, one JSON object last. A difference is explained
when README's "Where the plugin differs from the kubelet" names its field in its table (`| \\`field\\` |`),
or the field with the stage it was recorded at (`| \\`after-restart: list cpu_ids\\` |`).
Exit status: 0 when every difference is explained, 1 when one is not, 2 when a run could not be made (the
kubelet not built or started, a reference run that failed, a guest without the topology): one line says which.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import yaml

from testbed import CHECKOUT, start_latency
from testbed.cgroup_writes import count_writes
from testbed.containerd import CGROUP_MOUNT, Containerd, ContainerdError
from testbed.cri import CRI
from testbed.go_tools import GoToolError, build_tools
from testbed.node_record import (
    ADMITTED,
    NODE,
    POD,
    Field,
    Record,
    as_json,
    converged,
    from_json,
    live_sandboxes,
    manifest_name,
    newest_containers,
    record_cgroups,
    record_pod_resources,
    record_state,
)
from testbed.plugin_process import PluginProcess
from testbed.real_kubelet import (
    MANAGERS_OFF,
    NODE_NAME,
    SYNC_PERIOD_S,
    KubeletError,
    RealKubelet,
    annotated,
    binary_version,
    delete_pod,
    start_plugin,
)
from testbed.scenario import Scenario, ScenarioError, load_all
from testbed.wait import DeadlineExceeded, wait_until

README: Final = CHECKOUT / "README.md"
EXPLAINED_SECTION: Final = "### Where the plugin differs from the kubelet"
RESULTS: Final = CHECKOUT / ".cache" / "kubelet-compare"
GUEST_BASE: Final = Path("/run/kubelet-compare")
SETTLE_TIMEOUT_S: Final = 180.0
GUEST_TIMEOUT_S: Final = 3600.0
# The guests: 8 vCPUs, 2 threads per core (QEMU numbers siblings next to each other), 12 GiB.
TOPOLOGIES: Final = {2: ("--numa-nodes", "2", "--cpus", "8", "--threads-per-core", "2", "--memory", "12G"),
                     4: ("--numa-nodes", "4", "--cpus", "8", "--threads-per-core", "2", "--memory", "12G")}
BASE_NODE: Final = {
    "cpuManagerPolicy": "static", "memoryManagerPolicy": "Static",
    "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
    "reservedSystemCPUs": "0-1", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}],
}
"""Every scenario's node: CPU 0's core kept for the system, the eviction threshold's memory on node 0."""
MANAGER_KEYS: Final = ("cpuManagerPolicy", "cpuManagerPolicyOptions", "memoryManagerPolicy", "reservedMemory",
                       "topologyManagerPolicy", "topologyManagerScope", "topologyManagerPolicyOptions")
ERROR_NAME: Final = re.compile(r"\b([A-Z][A-Za-z]*Error)\b")
CONTAINER_FILES: Final = ("cpuset.cpus", "cpuset.mems", "cpu.max")
POD_FILES: Final = ("cpuset.cpus", "cpuset.mems", "cpu.max", "cpu.weight")
WATCHED_SYNC_PERIODS: Final = 3
LIMITED: Final = re.compile(r"\d+ \d+")
"""A `cpu.max` with a quota."""
REFUSED_AT_ADMISSION: Final = "pod rejected at admission"
RUNTIME_FAILURES: Final = {"Failed": "CreateContainerError",
                           "FailedCreatePodSandBox": "CreatePodSandboxError"}
"""The kubelet's event reason for a runtime call a plugin failed -> the pod's status as `kubectl` shows it."""


def reference_settings(scenario: Scenario) -> dict[str, Any]:
    return {**BASE_NODE, **scenario.node,
            "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True}}


def plugin_kubelet_settings(scenario: Scenario) -> dict[str, Any]:
    """The node's kubelet under the plugin: the reference's settings with every manager off."""
    kept = {k: v for k, v in reference_settings(scenario).items() if k not in MANAGER_KEYS}
    return {**kept, **MANAGERS_OFF, "featureGates": {"PodLevelResources": True}}


# -- inside the guest ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How a pod ended up: admitted, or refused by `rule`, seen as `surface`."""

    rule: str
    surface: str = ""


def _outcome(kubelet: RealKubelet, cri: CRI, scenario: Scenario, name: str) -> Outcome | None:
    """The pod's outcome once it has one: refused (a Warning event naming a rule), or every container
    running (a standard init container exited 0); None while neither."""
    for event in kubelet.events():
        if event.pod != f"default/{name}-{NODE_NAME}" or event.type != "Warning":
            continue
        if event.reason in RUNTIME_FAILURES:
            rules = [r for r in ERROR_NAME.findall(event.message) if r not in RUNTIME_FAILURES.values()]
            if rules:
                return Outcome(rules[-1], RUNTIME_FAILURES[event.reason])
        elif event.reason not in ("BackOff", "FailedSync"):
            return Outcome(event.reason, REFUSED_AT_ADMISSION)
    sandbox = next((s for s in live_sandboxes(cri) if manifest_name(s, NODE_NAME) == name), None)
    if sandbox is None:
        return None
    wanted = _containers(scenario.manifests[name])
    containers = newest_containers(cri, sandbox)
    for container, standard_init in wanted.items():
        state = containers[container].state if container in containers else ""
        if state != ("CONTAINER_EXITED" if standard_init else "CONTAINER_RUNNING"):
            return None
    return Outcome(ADMITTED)


def _containers(manifest: str) -> dict[str, bool]:
    """Container name -> whether it is a standard init container."""
    spec = yaml.safe_load(manifest)["spec"]
    found = {c["name"]: c.get("restartPolicy") != "Always" for c in spec.get("initContainers") or []}
    found.update({c["name"]: False for c in spec.get("containers") or []})
    return found


class Run:
    """One scenario on the node, as the reference (`plugin=False`) or under the plugin."""

    def __init__(self, ctrd: Containerd, kubelet_binary: Path, scenario: Scenario, *, plugin: bool,
                 logs: Path) -> None:
        self.ctrd = ctrd
        self.scenario = scenario
        self.mode = "plugin" if plugin else "kubelet"
        self.base = GUEST_BASE / scenario.name / self.mode
        self.logs = logs
        settings = plugin_kubelet_settings(scenario) if plugin else reference_settings(scenario)
        self.kubelet = RealKubelet(kubelet_binary, ctrd, self.base / "kubelet", settings)
        self.plugin: PluginProcess | None = None
        self.outcomes: dict[str, Outcome] = {}
        self.records: dict[str, Record] = {}

    def execute(self) -> dict[str, Record]:
        self.base.mkdir(parents=True, exist_ok=True)
        try:
            if self.mode == "plugin":
                self._start_plugin()
            self.kubelet.start()
            for step in self.scenario.steps:
                self._step(step.kind, step.argument)
            if not self.scenario.steps or self.scenario.steps[-1].kind != "record":
                self.records["end"] = self.record()
        finally:
            self.kubelet.stop()
            try:
                self.kubelet.clear()
            finally:
                if self.plugin is not None:
                    self.plugin.stop()
                    (self.logs / f"{self.scenario.name}.plugin.log").write_text("\n".join(self.plugin.lines))
                if self.kubelet.log_path.exists():
                    (self.logs / f"{self.scenario.name}.{self.mode}.kubelet.log").write_bytes(
                        self.kubelet.log_path.read_bytes())
        return self.records

    def _start_plugin(self) -> None:
        self.plugin = start_plugin(self.ctrd, self.base, reference_settings(self.scenario))

    def _step(self, kind: str, argument: str) -> None:
        if kind == "add":
            self._add(argument)
        elif kind == "delete":
            delete_pod(self.kubelet, argument)
            self.outcomes.pop(argument, None)
        elif kind == "watch-writes":
            self.records[argument] = self._watch_writes()
        elif kind == "restart-kubelet":
            self.kubelet.stop()
            self.kubelet.start()
            for name in list(self.outcomes):
                wait_until(partial(self._handled_again, name), SETTLE_TIMEOUT_S,
                           f"the restarted kubelet to take pod {name} in again")
                self._settle(name)
        else:
            self.records[argument] = self.record()

    def _handled_again(self, name: str) -> bool:
        """Whether the restarted kubelet has synced the pod, or refused it again (kubernetes#140989: a
        kubelet v1.37 re-admitting its running pods may find their own CPUs taken)."""
        pod = f"default/{name}-{NODE_NAME}"
        return self.kubelet.synced(name) or any(e.pod == pod and e.type == "Warning"
                                                for e in self.kubelet.events())

    def _add(self, name: str) -> None:
        text = self.scenario.manifests[name]
        if self.mode == "plugin":
            text = annotated(text, self.base / f"{name}.source.yaml")
        (self.kubelet.manifests / f"{name}.yaml").write_text(text)
        self._settle(name)

    def _settle(self, name: str) -> None:
        with self.ctrd.cri() as cri:
            self.outcomes[name] = wait_until(lambda: _outcome(self.kubelet, cri, self.scenario, name),
                                             SETTLE_TIMEOUT_S, f"pod {name} to run or be refused")

    def _watch_writes(self) -> Record:
        """Writes to every running container's and pod's cgroup files over three kubelet sync periods, a
        window in which nothing asks for a change: each write counted is one owner undoing another."""
        files: dict[str, Path] = {}
        with self.ctrd.cri() as cri:
            for sandbox in live_sandboxes(cri):
                pod = manifest_name(sandbox, NODE_NAME)
                for name, container in newest_containers(cri, sandbox).items():
                    info = cri.container_status(container.id)
                    if info.state != "CONTAINER_RUNNING":
                        continue
                    directory = CGROUP_MOUNT / info.cgroups_path.lstrip("/")
                    files.update({f"{pod}/{name}/{f}": directory / f for f in CONTAINER_FILES})
                    files.update({f"{pod}/{POD}/{f}": directory.parent / f for f in POD_FILES})
        counted = count_writes(files, WATCHED_SYNC_PERIODS * SYNC_PERIOD_S)
        record: Record = {}
        for label in files:
            pod, owner, name = label.split("/", 2)
            record[Field(pod, owner, f"writes of {name}")] = str(counted[label])
        return record

    def record(self) -> Record:
        refused = {n for n, o in self.outcomes.items() if o.rule != ADMITTED}
        state_dir = self.plugin.state_dir if self.plugin else self.kubelet.root_dir
        with self.ctrd.cri() as cri:
            wait_until(partial(converged, cri, NODE_NAME, state_dir / "cpu_manager_state"), SETTLE_TIMEOUT_S,
                       "every container's cpuset to be what the CPU state says")
            record, uids = record_cgroups(cri, NODE_NAME)
        record = {f: v for f, v in record.items() if f.pod not in refused}
        uids = {u: n for u, n in uids.items() if n not in refused}
        record.update(record_state(state_dir / "cpu_manager_state", state_dir / "memory_manager_state", uids))
        socket = self.plugin.podresources_socket if self.plugin else self.kubelet.podresources_socket
        record.update(record_pod_resources(socket, NODE_NAME, uids.values()))
        for name, outcome in self.outcomes.items():
            record[Field(name, POD, "admission")] = ADMITTED if outcome.rule == ADMITTED else "refused"
            if outcome.surface:
                record[Field(name, POD, "refusal rule")] = outcome.rule
                record[Field(name, POD, "refused as")] = outcome.surface
        return record


def guest_latency(args: argparse.Namespace) -> int:
    """Measure pod start latency on this guest (`testbed.start_latency`), write the JSON result."""
    node = Scenario("latency", "pod start latency", {}, [])
    settings = {"reference": reference_settings(node), "managers off": plugin_kubelet_settings(node),
                "plugin": reference_settings(node)}
    with Containerd(args.flavour, GUEST_BASE / "containerd") as ctrd:
        result = {"runtime": ctrd.versions.get("containerd", "unknown"),
                  "kubelet_version": binary_version(args.kubelet),
                  "latency": start_latency.measure(ctrd, args.kubelet, GUEST_BASE / "latency", args.latency,
                                                   settings)}
    args.out.write_text(json.dumps(result, indent=1))
    return 0


def guest_main(args: argparse.Namespace) -> int:
    """Run the scenarios on this guest, write the JSON result to `args.out`."""
    if args.latency:
        return guest_latency(args)
    scenarios = load_all(args.scenario, quick=args.quick)
    logs = args.out.parent / f"{args.out.stem}.logs"
    logs.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"kubelet_version": binary_version(args.kubelet), "scenarios": {}}
    with Containerd(args.flavour, GUEST_BASE / "containerd") as ctrd:
        result["runtime"] = ctrd.versions.get("containerd", "unknown")
        for scenario in scenarios:
            started = time.monotonic()
            entry: dict[str, Any] = {"about": scenario.about}
            for plugin in (False, True):
                mode = "plugin" if plugin else "kubelet"
                try:
                    records = Run(ctrd, args.kubelet, scenario, plugin=plugin, logs=logs).execute()
                except (KubeletError, ContainerdError, DeadlineExceeded, ScenarioError, OSError) as exc:
                    entry[f"{mode}_error"] = f"{type(exc).__name__}: {exc}"
                    break
                entry[mode] = {stage: as_json(record) for stage, record in records.items()}
            entry["seconds"] = round(time.monotonic() - started, 1)
            result["scenarios"][scenario.name] = entry
            print(f"kubelet-compare: {scenario.name} done in {entry['seconds']} s", flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


# -- on the host -----------------------------------------------------------------------------------------


def explained_fields(readme: Path = README) -> set[str]:
    """The fields README's "Where the plugin differs from the kubelet" table names (`| \\`field\\` | ...`)."""
    text = readme.read_text()
    start = text.index(EXPLAINED_SECTION)
    end = text.find("\n### ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))


def explanation_key(field: str, kubelet: str, plugin: str) -> str:
    """The name README's table explains a difference by: the field's, except a CFS quota both sides limit
    (`cpu.max (both limited)`), which is a different question from whether a container is limited at all."""
    if field.endswith("cpu.max") and LIMITED.fullmatch(kubelet) and LIMITED.fullmatch(plugin):
        return f"{field} (both limited)"
    return field


ADMISSION_FIELDS: Final = ("admission", "refusal rule", "refused as")


def _one_sided_pods(kubelet: Record, plugin: Record) -> set[str]:
    """Pods admitted on one side only, or with fields on one side only."""
    def admitted(record: Record) -> dict[str, str]:
        return {f.pod: v for f, v in record.items() if f.name == "admission"}

    theirs, ours = admitted(kubelet), admitted(plugin)
    differing = {pod for pod in theirs.keys() | ours.keys() if theirs.get(pod) != ours.get(pod)}
    present = ({f.pod for f in kubelet} ^ {f.pod for f in plugin}) - {NODE}
    return differing | present


def differences(scenario: str, kubelet: Mapping[str, Record], plugin: Mapping[str, Record]
                ) -> tuple[int, list[dict[str, str]]]:
    """(fields compared, the differing ones) over every stage both runs recorded.

    A pod admitted (or running) on one side only differs in every field it has; its admission fields, or
    one `running` field, stand for them."""
    compared = 0
    found = []
    for stage in kubelet:
        ours, theirs = plugin.get(stage, {}), kubelet[stage]
        one_sided = _one_sided_pods(theirs, ours)
        for pod in sorted(one_sided - {f.pod for f in (*ours, *theirs) if f.name in ADMISSION_FIELDS}):
            running = Field(pod, POD, "running")
            theirs = {**theirs, running: "yes" if any(f.pod == pod for f in theirs) else "no"}
            ours = {**ours, running: "yes" if any(f.pod == pod for f in ours) else "no"}
        for field in sorted(set(ours) | set(theirs)):
            compared += 1
            want, got = theirs.get(field, "(none)"), ours.get(field, "(none)")
            if field.pod in one_sided and field.name not in (*ADMISSION_FIELDS, "running"):
                continue
            if want != got:
                name = field.name if stage == "end" else f"{stage}: {field.name}"
                found.append({"scenario": scenario, "pod": field.pod, "container": field.container,
                              "field": name, "kubelet": want, "plugin": got,
                              "explains": explanation_key(field.name, want, got)})
    return compared, found


def _guest_command(flavour: str, kubelet: Path, out: Path, args: argparse.Namespace) -> list[str]:
    command = ["env", f"PYTHONPATH={CHECKOUT / 'tests'}", str(CHECKOUT / ".venv/bin/python"), "-m",
               "testbed.kubelet_compare", "guest",
               "--flavour", flavour, "--kubelet", str(kubelet), "--out", str(out)]
    command += ["--quick"] if args.quick else []
    command += ["--latency", str(args.latency)] if args.latency else []
    for name in args.scenario:
        command += ["--scenario", name]
    return command


def host_latency(args: argparse.Namespace, kubelet: Path) -> int:
    out = RESULTS / f"latency-containerd{args.flavours[0]}.json"
    out.unlink(missing_ok=True)
    vm = [str(CHECKOUT / "hack/vm-run"), *TOPOLOGIES[2], "--timeout", str(GUEST_TIMEOUT_S), "--",
          *_guest_command(args.flavours[0], kubelet, out, args)]
    done = subprocess.run(vm, check=False)
    if done.returncode != 0 or not out.exists():
        print(f"kubelet-compare: the latency guest failed (exit {done.returncode})", file=sys.stderr)
        return 2
    result = json.loads(out.read_text())
    for mode, figures in result["latency"].items():
        print(f"kubelet-compare: pod start, {mode}: median {figures['median_ms']} ms, "
              f"p90 {figures['p90_ms']} ms ({figures['pods']} pods)")
    print(json.dumps(result))
    return 0


def host_main(args: argparse.Namespace) -> int:
    try:
        kubelet = build_tools("kubelet")["kubelet"] / "kubelet"
    except GoToolError as exc:
        print(f"kubelet-compare: the kubelet could not be built: {exc}", file=sys.stderr)
        return 2
    if args.latency:
        return host_latency(args, kubelet)
    RESULTS.mkdir(parents=True, exist_ok=True)
    explained = explained_fields()
    summary: dict[str, Any] = {"kubelet_version": binary_version(kubelet), "topologies": [], "runtimes": [],
                               "scenarios": [], "fields_compared": 0, "differences": [], "unexplained": 0}
    failures = []
    for flavour in args.flavours:
        try:
            Containerd(flavour).fetch()
        except ContainerdError as exc:
            print(f"kubelet-compare: containerd {flavour} could not be fetched: {exc}", file=sys.stderr)
            return 2
        for nodes in args.topologies:
            out = RESULTS / f"numa{nodes}-containerd{flavour}.json"
            out.unlink(missing_ok=True)
            vm = [str(CHECKOUT / "hack/vm-run"), *TOPOLOGIES[nodes], "--timeout", str(GUEST_TIMEOUT_S), "--",
                  *_guest_command(flavour, kubelet, out, args)]
            done = subprocess.run(vm, check=False)
            if done.returncode != 0 or not out.exists():
                failures.append(f"the {nodes}-NUMA guest on containerd {flavour} failed "
                                f"(exit {done.returncode})")
                continue
            result = json.loads(out.read_text())
            summary["topologies"] = sorted({*summary["topologies"], f"{nodes} NUMA nodes"})
            summary["runtimes"] = sorted({*summary["runtimes"], result["runtime"]})
            for name, entry in result["scenarios"].items():
                where = f"{name} ({nodes} NUMA, containerd {flavour})"
                if "kubelet_error" in entry:
                    failures.append(f"scenario {where}: the reference run failed: {entry['kubelet_error']}")
                    continue
                if "plugin_error" in entry:
                    failures.append(f"scenario {where}: the plugin run failed: {entry['plugin_error']}")
                    continue
                stages = {mode: {s: from_json(rows) for s, rows in entry[mode].items()}
                          for mode in ("kubelet", "plugin")}
                compared, found = differences(where, stages["kubelet"], stages["plugin"])
                summary["fields_compared"] += compared
                summary["differences"] += found
                summary["scenarios"] = sorted({*summary["scenarios"], name})
    for difference in summary["differences"]:
        difference["explained"] = difference.pop("explains") in explained or difference["field"] in explained
        mark = "" if difference["explained"] else "  (unexplained)"
        where = f"{difference['scenario']}: {difference['pod']}/{difference['container']}"
        print(f"{where} {difference['field']}: "
              f"kubelet {difference['kubelet']!r}, plugin {difference['plugin']!r}{mark}")
    summary["unexplained"] = sum(not d["explained"] for d in summary["differences"])
    for failure in failures:
        print(f"kubelet-compare: {failure}", file=sys.stderr)
    print(f"kubelet-compare: {summary['kubelet_version']}, {len(summary['scenarios'])} scenarios, "
          f"{summary['fields_compared']} fields compared, {len(summary['differences'])} differences, "
          f"{summary['unexplained']} unexplained")
    if args.json:
        print(json.dumps(summary))
    if failures:
        return 2
    return 1 if summary["unexplained"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/kubelet-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the short form: the quick scenarios, 2 NUMA nodes")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    parser.add_argument("--topologies", default=None, help="NUMA node counts, comma-separated (default 2,4)")
    parser.add_argument("--flavours", default="2", help="containerd flavours, comma-separated (default 2)")
    parser.add_argument("--scenario", action="append", default=[], help="only this scenario (repeatable)")
    parser.add_argument("--latency", type=int, default=0, metavar="N",
                        help="instead: pod start latency, N pods per way of running the node (2-NUMA guest)")
    sub = parser.add_subparsers(dest="where")
    guest = sub.add_parser("guest", help="inside the guest: run the scenarios, write the result")
    guest.add_argument("--flavour", default="2")
    guest.add_argument("--kubelet", type=Path, required=True)
    guest.add_argument("--out", type=Path, required=True)
    guest.add_argument("--quick", action="store_true")
    guest.add_argument("--scenario", action="append", default=[])
    guest.add_argument("--latency", type=int, default=0)
    args = parser.parse_args(argv)
    if args.where == "guest":
        return guest_main(args)
    topologies = args.topologies or ("2" if args.quick else "2,4")
    args.topologies = [int(n) for n in topologies.split(",")]
    args.flavours = args.flavours.split(",")
    if unknown := [n for n in args.topologies if n not in TOPOLOGIES]:
        parser.error(f"--topologies: no guest of {unknown} NUMA nodes (have {sorted(TOPOLOGIES)})")
    return host_main(args)


if __name__ == "__main__":
    sys.exit(main())
