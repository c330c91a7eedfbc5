"""A real kubelet (built by `hack/build-go-tools`) running a node standalone on the test bed's containerd.

There is no API server: pods are static pods, read from `manifests` every second, and named
`<name>-<node>` by the kubelet. What the kubelet decides is read where a node operator reads it: the kernel's
cgroup files, its state files (`cpu_manager_state`, `memory_manager_state` under its root directory), its
PodResources socket, and its events, which a standalone kubelet only logs (`Event occurred`, JSON lines at
verbosity 3): an admission refusal is a Warning event whose reason is the error's type.

Only inside the cgroup-v2 guest (`hack/vm-run`): on a host the kubelet rewrites kernel settings such as
`kernel.panic` and claims `/kubepods`. It is stopped by the PID it was started with; `clear` then removes
every pod through CRI, unmounts what the kubelet mounted under its base directory, removes the cgroups it
made and its state, so the next start is a fresh node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from testbed.containerd import Containerd, cgroup_mounts, unmount_under
from testbed.node_record import live_sandboxes, manifest_name
from testbed.plugin_process import PluginProcess
from testbed.wait import DeadlineExceeded, wait_until

NODE_NAME: Final = "node-1"
SYNC_PERIOD_S: Final = 10
"""The kubelet's `syncFrequency` here (a minute by default), so that a few periods fit in a test."""
HEALTHZ: Final = "http://127.0.0.1:10248/healthz"
START_TIMEOUT_S: Final = 180.0  # a kubelet under TCG takes tens of seconds to serve healthz
STOP_TIMEOUT_S: Final = 30.0
GONE_TIMEOUT_S: Final = 180.0
KUBEPODS: Final = "kubepods"
MANAGERS_OFF: Final = {"cpuManagerPolicy": "none", "memoryManagerPolicy": "None",
                       "topologyManagerPolicy": "none"}
"""What README tells operators to set on a node the plugin places pods on."""


class KubeletError(RuntimeError):
    """The kubelet could not be built, started or cleared; the message says which and why."""


def binary_version(binary: Path) -> str:
    """`kubelet --version`'s version word (`Kubernetes v1.37.2` -> `v1.37.2`)."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False, timeout=60)
    words = (done.stdout or done.stderr).split()
    return words[-1] if words else "unknown"


@dataclass(frozen=True)
class Event:
    """One event the kubelet recorded about a pod (object `namespace/name-node`)."""

    pod: str
    type: str
    reason: str
    message: str


class RealKubelet:
    """One kubelet process over `ctrd`, everything it writes under `base` (see the module docstring)."""

    def __init__(self, binary: Path, ctrd: Containerd, base: Path, settings: Mapping[str, Any], *,
                 kubeconfig: Path | None = None) -> None:
        """`kubeconfig` registers the node with an API server (testbed.cluster); without it, standalone."""
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.ctrd = ctrd
        self.base = base
        self.settings = dict(settings)
        self.root_dir = base / "root"
        self.manifests = base / "manifests"
        self.config_path = base / "kubelet.yaml"
        self.log_path = base / "kubelet.log"
        self.podresources_socket = self.root_dir / "pod-resources" / "kubelet.sock"
        self._process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def config(self) -> dict[str, Any]:
        """The KubeletConfiguration: standalone, cgroupfs like the test bed's runc, JSON logs with events,
        `settings` (the scenario's managers, policies, reservations, feature gates) on top."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "staticPodPath": str(self.manifests), "fileCheckFrequency": "1s",
            "syncFrequency": f"{SYNC_PERIOD_S}s",
            "containerRuntimeEndpoint": f"unix://{self.ctrd.cri_socket}", "cgroupDriver": "cgroupfs",
            "failSwapOn": False, "failCgroupV1": False, "address": "127.0.0.1", "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248, "port": 10250,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.base / "pod-logs"), "resolvConf": "",
            # Disk pressure on the guest's tmpfs must not evict the pods under test; memory as on a node.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%", "imagefs.available": "0%",
                             "nodefs.inodesFree": "0%", "imagefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "cpuManagerReconcilePeriod": "10s",
            "logging": {"format": "json", "verbosity": 3},
            **self.settings,
        }

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the kubelet and wait until its healthz answers ok."""
        if self.running:
            raise KubeletError(f"the kubelet of {self.base} already runs")
        for directory in (self.root_dir, self.manifests, self.base / "pod-logs"):
            directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        with self.log_path.open("ab") as log_file:
            self._log_offset = log_file.tell()
            self._process = subprocess.Popen(
                [str(self.binary), "--config", str(self.config_path), "--root-dir", str(self.root_dir),
                 "--hostname-override", NODE_NAME,
                 *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else [])],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, cwd=self.base,
                start_new_session=True)
        try:
            wait_until(self._healthy, START_TIMEOUT_S, "the kubelet's healthz")
        except (DeadlineExceeded, KubeletError) as exc:
            self.stop()
            raise KubeletError(f"the kubelet did not start: {exc}; log tail:\n{self.log_tail()}") from exc

    def _healthy(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise KubeletError(f"it exited with status {self._process.returncode}")
        try:
            with urllib.request.urlopen(HEALTHZ, timeout=2) as answer:
                return bool(answer.read().strip() == b"ok")
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it is still there after STOP_TIMEOUT_S; its pods keep running."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def clear(self) -> None:
        """After `stop`: every pod removed through CRI, the kubelet's mounts, cgroups and state gone."""
        if self.running:
            raise KubeletError("clear() needs the kubelet stopped first")
        with self.ctrd.cri() as cri:
            cri.remove_all()
        unmount_under(self.base)
        for mount in cgroup_mounts():
            top = mount / KUBEPODS
            if top.is_dir():
                for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
                    with contextlib.suppress(OSError):
                        Path(directory).rmdir()
        shutil.rmtree(self.root_dir, ignore_errors=True)
        shutil.rmtree(self.manifests, ignore_errors=True)

    # -- what it did -----------------------------------------------------------------------------------

    def log_lines(self) -> Iterator[dict[str, Any]]:
        """The JSON log records of this start (lines that are not JSON, such as a panic, are skipped)."""
        with contextlib.suppress(OSError), self.log_path.open("rb") as log_file:
            log_file.seek(self._log_offset)
            for line in log_file:
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if isinstance(record, dict):
                        yield record

    def events(self) -> list[Event]:
        """The pod events of this start, in order (the object is logged as `{name, namespace}`)."""
        found = []
        for r in self.log_lines():
            if r.get("msg") == "Event occurred" and r.get("kind") == "Pod":
                ref = r.get("object") or {}
                pod = (f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict)
                       else str(ref))
                found.append(Event(pod, str(r.get("type", "")), str(r.get("reason", "")),
                                   str(r.get("message", ""))))
        return found

    def synced(self, name: str) -> bool:
        """Whether this start's pod workers have synced the static pod `name` once (after its admission):
        before that a restarted kubelet's PodResources and managers do not know the pod yet."""
        pod = f"{name}-{NODE_NAME}"
        return any(r.get("msg") == "computePodActions got for pod" and isinstance(r.get("pod"), dict)
                   and r["pod"].get("name") == pod for r in self.log_lines())

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def start_plugin(ctrd: Containerd, base: Path, settings: Mapping[str, Any]) -> PluginProcess:
    """`nri-podlevel run --config` with the reference kubelet's own KubeletConfiguration, registered."""
    config = base / "plugin.yaml"
    config.write_text(yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                      "kind": "KubeletConfiguration", **settings}, sort_keys=False))
    plugin = PluginProcess(ctrd.nri_socket, ["--config", str(config)], state_dir=base / "plugin-state",
                           echo=False)
    try:
        plugin.wait_registered()
    except BaseException:
        plugin.stop()  # one that registers late must not place the next scenario's reference run
        raise
    return plugin


def annotated(text: str, source: Path) -> str:
    """The manifest as `nri-podlevel annotate` writes it (static pods never reach the admission webhook)."""
    source.write_text(text)
    done = subprocess.run([sys.executable, "-m", "podlevel.cli.main", "annotate", str(source)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KubeletError(f"nri-podlevel annotate {source}: {done.stderr.strip()}")
    return done.stdout


def delete_pod(kubelet: RealKubelet, name: str) -> None:
    """Remove the pod's manifest and wait until the kubelet stopped its sandbox."""
    (kubelet.manifests / f"{name}.yaml").unlink()
    with kubelet.ctrd.cri() as cri:
        wait_until(lambda: all(manifest_name(s, NODE_NAME) != name for s in live_sandboxes(cri)),
                   GONE_TIMEOUT_S, f"pod {name} to be gone")
