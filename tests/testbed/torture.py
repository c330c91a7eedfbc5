"""`hack/torture`: seeded random churn of pods and containers against a private containerd with `nri-podlevel
run` attached, the plugin killed with SIGKILL and containerd restarted at random moments, and after every
restart the invariants of `testbed.invariants` checked against the checkpoint files and the cgroups.

A round is one action: create a pod (a shape from deploy/examples, deploy/demo and torture-pods.yaml that
fits this host, either pod-level with the pod-shape annotation or as a plain node-pool pod without it),
crash-restart a container (its task killed or stopped, then re-created under the same name with the next
attempt, before or after the exited one is removed, as a kubelet would), stop a pod, remove a pod, kill the
plugin (sometimes with an action run while it is down) and start it again with the same flags, kill it in
the middle of an action (so also between its checkpoint write and its answer), or restart containerd. The
seed fixes the sequence of actions and their targets; when a kill lands inside an action is up to timing.

The plugin keeps its checkpoints in a fresh state directory per run; the pod cgroup check needs
`nri-podlevel run --cgroup-root` and is reported as skipped by capability when the plugin under test lacks
it. Exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from podlevel.cli.engine_flags import default_reserved_cpus
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.pod import CPU, MEMORY, Container, ContainerKind, Pod
from podlevel.podspec.workloads import load_pods
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE
from podlevel.sysfs.reader import read_topology
from testbed import CHECKOUT
from testbed.cgroupfs import CGROUP_MOUNT, read_cgroup
from testbed.containerd import FLAVOURS, Containerd
from testbed.cri import CRI, CRIError
from testbed.invariants import (
    DRIFT,
    KINDS,
    POD_CGROUP,
    Checks,
    ContainerState,
    Observation,
    PodState,
    Violation,
    check,
)
from testbed.kubelet import cgroup_parent, start_container, start_pod
from testbed.plugin_process import REGISTERED, PluginProcess, run_help
from testbed.wait import DeadlineExceeded, wait_until

SHAPE_FILES: Final = (
    *sorted((CHECKOUT / "deploy" / "examples").glob("*.yaml")),
    *sorted((CHECKOUT / "deploy" / "demo").glob("*.yaml")),
    Path(__file__).with_name("torture-pods.yaml"),
)
MAX_PODS: Final = 5
POD_LEVEL_SHARE: Final = 0.7
"""How often a shape with pod-level resources is started with the pod-shape annotation."""
DOWN_ACTION_SHARE: Final = 0.3
"""How often a plugin kill is followed by an action while the plugin is down."""
KILL_WITHIN_S: Final = 0.3
"""A kill during an action lands this long after the action starts, at most."""
SETTLE_S: Final = 10.0
"""After a restart the cgroups may still be catching up with the Synchronize answer: poll this long."""
RECONNECT_TIMEOUT_S: Final = 40.0
EXIT_TIMEOUT_S: Final = 10.0
RUNNING: Final = "CONTAINER_RUNNING"
DECISIONS: Final = tuple(f'{before}{event} ' for event in ("admitted", "placed", "released")
                         for before in ('"event": "', "] "))
"""The plugin's log lines for a pod admitted (at its sandbox), a container placed and a pod released, in the
JSON and the console layout: written after the checkpoint, before the answer."""
ACTIONS: Final = {"create": 30, "crash-restart": 25, "stop-pod": 8, "remove-pod": 14, "kill-plugin": 10,
                  "kill-during": 8, "restart-containerd": 5}


def qualifies(container: Container) -> bool:
    """Exclusive CPUs inside a bubble: equivalent-Guaranteed with an integer CPU request."""
    return container.resources.is_equivalent_guaranteed() and container.resources.request(CPU) % 1000 == 0


def cpu_need(pod: Pod) -> int:
    return pod.resources.request(CPU) if pod.resources is not None else pod.aggregate_request(CPU)


def memory_need(pod: Pod) -> int:
    return pod.resources.request(MEMORY) if pod.resources is not None else pod.aggregate_request(MEMORY)


def fitting_shapes(pods: Iterable[Pod], assignable: CPUSet, memory_per_node: int) -> list[Pod]:
    """One pod per name (the first seen) whose CPU and memory needs fit one NUMA node's assignable share."""
    shapes: dict[str, Pod] = {}
    for pod in pods:
        if pod.name not in shapes and cpu_need(pod) <= len(assignable) * 1000 and memory_need(pod) <= \
                memory_per_node:
            shapes[pod.name] = pod
    return list(shapes.values())


@dataclass(frozen=True)
class Capabilities:
    """What the plugin under test can do, from `nri-podlevel run --help`."""

    cgroup_root: bool

    @classmethod
    def of(cls, help_text: str) -> Capabilities:
        return cls("--cgroup-root" in help_text)

    def skipped(self) -> list[str]:
        """What the checks cannot cover, for the closing lines."""
        return [] if self.cgroup_root else [f"({POD_CGROUP}) {KINDS[POD_CGROUP]}"]


@dataclass
class LivePod:
    pod: Pod
    pod_level: bool
    sandbox_id: str
    cgroup_parent: str | None
    containers: dict[str, str] = field(default_factory=dict)
    """long-running container name -> the id of its current attempt (absent: not running)."""
    attempts: dict[str, int] = field(default_factory=dict)
    stopped: bool = False

    @property
    def long_running(self) -> list[Container]:
        return [c for c in self.pod.all_containers if c.kind is not ContainerKind.INIT]

    def state(self, cgroup_cpus: CPUSet | None) -> PodState:
        pod = self.pod
        return PodState(
            pod.uid, pod.name, pod_level=self.pod_level and pod.resources is not None,
            exclusive=frozenset(c.name for c in pod.all_containers if qualifies(c)),
            standard_init=frozenset(c.name for c in pod.init_containers if c.kind is ContainerKind.INIT),
            cgroup_cpus=cgroup_cpus)


@dataclass
class Tally:
    rounds: int = 0
    kills: int = 0
    restarts: int = 0
    checks: int = 0
    violations: list[tuple[int, str, Violation]] = field(default_factory=list)
    """(round, after which action, violation)."""


class Torture:
    """The churn on one running containerd; `close()` stops the plugin and removes every pod."""

    def __init__(self, ctrd: Containerd, cri: CRI, rng: random.Random, *, run_dir: Path,
                 shapes: Sequence[Pod], reserved: CPUSet, online: CPUSet, capabilities: Capabilities) -> None:
        self.ctrd = ctrd
        self.cri = cri
        self.rng = rng
        self.shapes = list(shapes)
        self.reserved = reserved
        self.online = online
        self.capabilities = capabilities
        self.state_dir = run_dir / "state"
        self.plugin_log = run_dir / "plugin.log"
        self.pods: dict[str, LivePod] = {}
        self.tally = Tally()
        self.created = 0
        self.round = 0
        self.flags = ["--reserved-cpus", str(reserved)]
        if capabilities.cgroup_root:
            # The sandboxes' cgroup parents are cgroup paths under the test bed's own top-level cgroup;
            # the plugin resolves them below the cgroup mount, as it does for a kubelet's.
            self.flags += ["--cgroup-root", str(CGROUP_MOUNT)]
        self.plugin = self._start_plugin()

    # -- the plugin ------------------------------------------------------------------------------------

    def _start_plugin(self) -> PluginProcess:
        plugin = PluginProcess(self.ctrd.nri_socket, self.flags, state_dir=self.state_dir, echo=False)
        try:
            plugin.wait_registered(RECONNECT_TIMEOUT_S)
        except BaseException:
            self._retire(plugin, kill=True)
            raise
        return plugin

    def _retire(self, plugin: PluginProcess, *, kill: bool) -> None:
        """End `plugin` (SIGKILL as a crash, or a clean stop) and keep its log."""
        if kill:
            plugin.kill()
        else:
            plugin.stop()
        with self.plugin_log.open("a") as log:
            log.write(f"--- nri-podlevel run pid {plugin.pid} ({'killed' if kill else 'stopped'}) "
                      f"at round {self.round}\n")
            log.writelines(f"{line}\n" for line in plugin.lines)

    def closing_check(self) -> None:
        """A last kill and restart, so the end state is checked right after a Synchronize too."""
        self._retire(self.plugin, kill=True)
        self.tally.kills += 1
        self.plugin = self._start_plugin()
        self.verify("the closing plugin restart")

    # -- one round -------------------------------------------------------------------------------------

    def step(self) -> str:
        """Run one round; returns what it did."""
        self.round += 1
        action = self.rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
        if action == "create" or not self.pods:
            done = self.create() if len(self.pods) < MAX_PODS else self.remove_pod()
        elif action == "kill-plugin":
            done = self.kill_plugin()
        elif action == "kill-during":
            done = self.kill_during()
        elif action == "restart-containerd":
            done = self.restart_containerd()
        else:
            done = self.churn(action)
        self.tally.rounds += 1
        return done

    def churn(self, action: str) -> str:
        if action == "crash-restart":
            return self.crash_restart()
        if action == "stop-pod":
            return self.stop_pod()
        if action == "remove-pod":
            return self.remove_pod()
        return self.create()

    def _pick(self, running: bool) -> LivePod | None:
        candidates = [p for p in self.pods.values() if not (running and p.stopped)]
        return self.rng.choice(sorted(candidates, key=lambda p: p.pod.name)) if candidates else None

    def create(self) -> str:
        shape = self.rng.choice(self.shapes)
        self.created += 1
        pod_level = shape.resources is not None and self.rng.random() < POD_LEVEL_SHARE
        pod = replace(shape, name=f"{shape.name}-{self.created}",
                      uid=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)))
        what = f"create {pod.name} ({'pod-level' if pod_level else 'node pool'})"
        try:
            started = start_pod(self.cri, pod, with_shape=pod_level)
        except CRIError as err:
            self._remove_by_uid(pod.uid)
            return f"{what}: refused by {err.method}: {_said(err)}"
        live = LivePod(pod, pod_level, started.sandbox_id, cgroup_parent(self.cri, pod))
        live.containers = {c.name: started.containers[c.name] for c in live.long_running}
        self.pods[pod.uid] = live
        return what

    def _remove_by_uid(self, uid: str) -> None:
        for summary in self.cri.list_pods():
            if summary.uid == uid:
                self.cri.stop_pod(summary.id)
                self.cri.remove_pod(summary.id)

    def crash_restart(self) -> str:
        live = self._pick(running=True)
        if live is None or not live.long_running:
            return self.create()
        container = self.rng.choice(live.long_running)
        how = self.rng.choice(["kill", "stop"])
        create_first = self.rng.random() < 0.5
        what = f"crash-restart {live.pod.name}/{container.name} ({how}, " \
               f"{'create then remove' if create_first else 'remove then create'})"
        old = live.containers.pop(container.name, None)
        try:
            if old is not None:
                self._end_task(old, how)
                if not create_first:
                    self.cri.remove_container(old)
            attempt = live.attempts.get(container.name, 0) + 1
            live.attempts[container.name] = attempt
            live.containers[container.name] = start_container(self.cri, live.sandbox_id, live.pod, container,
                                                              attempt=attempt)
            if old is not None and create_first:
                self.cri.remove_container(old)
        except CRIError as err:
            return f"{what}: failed in {err.method}: {_said(err)}"
        return what

    def _end_task(self, container_id: str, how: str) -> None:
        if how == "stop":
            self.cri.stop_container(container_id)
            return
        pid = self.cri.container_status(container_id).pid
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: self.cri.container_status(container_id).state != RUNNING, EXIT_TIMEOUT_S,
                   f"container {container_id[:12]} to exit after SIGKILL")

    def stop_pod(self) -> str:
        live = self._pick(running=True)
        if live is None:
            return self.create()
        try:
            self.cri.stop_pod(live.sandbox_id)
        except CRIError as err:
            return f"stop-pod {live.pod.name}: failed: {_said(err)}"
        live.stopped = True
        live.containers.clear()
        return f"stop-pod {live.pod.name}"

    def remove_pod(self) -> str:
        live = self._pick(running=False)
        if live is None:
            return self.create()
        try:
            self.cri.stop_pod(live.sandbox_id)
            self.cri.remove_pod(live.sandbox_id)
        except CRIError as err:
            return f"remove-pod {live.pod.name}: failed: {_said(err)}"
        del self.pods[live.pod.uid]
        return f"remove-pod {live.pod.name}"

    def kill_plugin(self) -> str:
        self._retire(self.plugin, kill=True)
        self.tally.kills += 1
        what = "kill-plugin"
        if self.rng.random() < DOWN_ACTION_SHARE:
            what += f", while down: {self.churn(self.rng.choice(['create', 'crash-restart', 'remove-pod']))}"
        self.plugin = self._start_plugin()
        self.verify(what)
        return what

    def kill_during(self) -> str:
        """Kill the plugin inside an action: after a random delay, or as soon as it logs a decision, which
        it does after writing the checkpoint and before its answer leaves."""
        action = self.rng.choice(["create", "crash-restart", "stop-pod"])
        plugin = self.plugin
        on_decision = self.rng.random() < 0.5
        timer = threading.Timer(self.rng.uniform(0, KILL_WITHIN_S), plugin.kill)
        if on_decision:
            # Only the signal: the reader thread that calls this cannot wait for itself.
            plugin.on_line = lambda line: plugin.process.kill() if any(d in line for d in DECISIONS) else None
        else:
            timer.start()
        try:
            done = self.churn(action)
        finally:
            if timer.is_alive():
                timer.join()
        self.tally.kills += 1
        self._retire(plugin, kill=True)
        self.plugin = self._start_plugin()
        what = f"kill-plugin {'at its decision' if on_decision else 'during'} {done}"
        self.verify(what)
        return what

    def restart_containerd(self) -> str:
        marker = len(self.plugin.lines)
        self.ctrd.restart()
        self.tally.restarts += 1
        self.plugin.wait_for_line(REGISTERED, RECONNECT_TIMEOUT_S, after=marker)
        self.verify("restart-containerd")
        return "restart-containerd"

    # -- checking --------------------------------------------------------------------------------------

    def checks(self) -> Checks:
        return Checks(pod_cgroups=self.capabilities.cgroup_root)

    def observe(self) -> Observation:
        """Everything the invariants need, read now: CRI, cgroupfs and the state directory."""
        pods: dict[str, PodState] = {}
        uid_of: dict[str, str] = {}
        for summary in self.cri.list_pods():
            uid_of[summary.id] = summary.uid
            live = self.pods.get(summary.uid)
            if live is None:
                pods[summary.uid] = PodState(summary.uid, summary.name)
                continue
            cgroup_cpus = None
            if self.checks().pod_cgroups and live.cgroup_parent and summary.state == "SANDBOX_READY":
                cgroup_cpus = CPUSet.parse(read_cgroup(live.cgroup_parent).effective_cpus)
            pods[summary.uid] = live.state(cgroup_cpus)
        containers = []
        for listed in self.cri.list_containers():
            if listed.state != RUNNING:
                continue
            status = self.cri.container_status(listed.id)
            values = read_cgroup(status.cgroups_path)
            containers.append(ContainerState(
                uid_of.get(listed.pod_id, ""), listed.name, listed.id, CPUSet.parse(values.effective_cpus),
                values.cpu_quota_us is None))
        return Observation(
            self.online, self.reserved, _read(self.state_dir / CPU_STATE_FILE),
            _read(self.state_dir / MEMORY_STATE_FILE), pods, tuple(containers),
            tuple(sorted(p.name for p in self.state_dir.glob("*.corrupt-*"))))

    def verify(self, after: str) -> None:
        """Check the invariants, polling up to SETTLE_S for the cgroups to follow; records what remains."""
        self.tally.checks += 1
        checks = self.checks()
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                found = check(self.observe(), checks)
            except (FileNotFoundError, CRIError) as err:
                # A container that ended between listing and reading: read again.
                found = [Violation(DRIFT, f"could not read the cgroups: {err}")]
            if not found or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        self.tally.violations += [(self.round, after, v) for v in found]

    def close(self) -> None:
        """Stop the plugin and remove every pod, whatever happened before."""
        try:
            self.cri.remove_all()
            self.pods.clear()
        finally:
            self._retire(self.plugin, kill=False)


def _said(err: CRIError) -> str:
    """The runtime's reason on one line, short enough for a round's line."""
    return " ".join(err.details.split())[:160]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def load_shapes(assignable: CPUSet, memory_per_node: int) -> list[Pod]:
    pods = [pod for path in SHAPE_FILES for pod in load_pods(path.read_text(), str(path))]
    return fitting_shapes(pods, assignable, memory_per_node)


def closing_lines(tally: Tally, capabilities: Capabilities, seed: int) -> list[str]:
    lines = [f"rounds {tally.rounds}, plugin kills {tally.kills}, containerd restarts {tally.restarts}, "
             f"violations {len(tally.violations)}"]
    lines += [f"  seed {seed} round {r} after {after}: {v}" for r, after, v in tally.violations]
    skipped = capabilities.skipped()
    lines.append(f"checks {tally.checks}" + (f"; skipped by capability: {', '.join(skipped)} "
                 "(nri-podlevel run has no --cgroup-root)" if skipped else "; every invariant checked"))
    return lines


def run(ctrd: Containerd, *, seed: int, rounds: int, run_dir: Path,
        out: Callable[[str], None] = print) -> Tally:
    """`rounds` rounds of churn on a running containerd, a check after every restart and at the end."""
    topology = read_topology()
    online = topology.all_cpus
    reserved = default_reserved_cpus(topology)
    memory_per_node = min(node.memory for node in topology.numa_nodes)
    shapes = load_shapes(online - reserved, memory_per_node)
    capabilities = Capabilities.of(run_help())
    run_dir.mkdir(parents=True, exist_ok=True)
    out(f"seed {seed}: {rounds} rounds on {ctrd.versions.get('containerd', ctrd.flavour.name)}, CPUs "
        f"{online} (reserved {reserved}), shapes {', '.join(p.name for p in shapes)}; plugin log "
        f"{run_dir / 'plugin.log'}")
    with ctrd.cri() as cri:
        torture = Torture(ctrd, cri, random.Random(seed), run_dir=run_dir, shapes=shapes, reserved=reserved,
                          online=online, capabilities=capabilities)
        out(f"nri-podlevel run --state-dir {torture.state_dir} {' '.join(torture.flags)}")
        try:
            for _ in range(rounds):
                done = torture.step()
                tally = torture.tally
                out(f"seed {seed} round {torture.round}: {done}; kills {tally.kills}, containerd restarts "
                    f"{tally.restarts}, violations {len(tally.violations)}")
            torture.closing_check()
        finally:
            torture.close()
    for line in closing_lines(torture.tally, capabilities, seed):
        out(line)
    return torture.tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/torture", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="random seed (default: a random one, printed)")
    parser.add_argument("--rounds", type=int, default=100, help="rounds of churn (default %(default)s)")
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), default="2")
    parser.add_argument("--base", type=Path, help="containerd's private directory (not on overlayfs; "
                                                   "default /tmp/nri-podlevel-torture-FLAVOUR)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    base = args.base or Path(f"/tmp/nri-podlevel-torture-{args.flavour}")
    with Containerd(args.flavour, base) as ctrd:
        run_dir = Path(tempfile.mkdtemp(prefix="torture-", dir=base))
        tally = run(ctrd, seed=seed, rounds=args.rounds, run_dir=run_dir)
    if tally.violations:
        print(f"kept the state directory and the plugin's log in {run_dir}")
        return 1
    shutil.rmtree(run_dir)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DeadlineExceeded as exc:
        print(f"hack/torture: {exc}", file=sys.stderr)
        sys.exit(2)
