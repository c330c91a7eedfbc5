"""A one-node Kubernetes cluster of the field's own binaries: `hack/cluster up [--install] | status | down`.

Every component is the real program at one Kubernetes release (the kubelet's), built from the Go module
proxy by `hack/build-go-tools`: etcd (the release Kubernetes is tested with), kube-apiserver,
kube-controller-manager, kube-scheduler, the kubelet and kubectl. They all run in one cgroup-v2 multi-NUMA
guest (`hack/vm-run`), the node: the control plane on the guest's loopback as a kubeadm node has it, the
kubelet registered as `node-1` over the test bed's containerd with its NRI socket at `/var/run/nri`, where
the DaemonSet mounts it. A kubelet runs only in a guest (on a host it rewrites kernel settings), and the API
server must reach the webhook's pod and the kubelet (`kubectl exec`, `logs`), both on the guest's network:
so the API server is there too, and the host reaches it through one forwarded port.

`up` makes the certificates (testbed.tls: one CA, a serving certificate, a client certificate per
component), boots the guest in the background (`vm.pid` under the state directory), waits until the node
is Ready and prints shell assignments (`eval "$(hack/cluster up)"`): KUBECONFIG (an admin's, for the host),
KUBECTL, CLUSTER_STATE, CLUSTER_NODE. `--install` builds the image first (`hack/image`), imports it into the
node's containerd, and installs deploy/ as README's Installing says: `kubectl apply -k` of an overlay,
`hack/webhook-certs`, the node labelled, both workloads rolled out. `down` asks the guest to stop, kills
what is left by PID, and removes the state directory; the guest's own files (etcd's data, containerd's,
the kubelet's) are in its memory and go with it. What runs in the guest is `guest STATE`, this module too.

A component that does not come up fails `up` with its name and its last log line; every component logs to
`logs/NAME.log` under the state directory, which the host reads while the cluster runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from testbed import CHECKOUT, agent_image
from testbed.containerd import FLAVOURS, Containerd
from testbed.go_tools import build_tools
from testbed.images import PAUSE_IMAGE
from testbed.real_kubelet import MANAGERS_OFF, NODE_NAME, RealKubelet
from testbed.tls import TestCA
from testbed.wait import DeadlineExceeded, wait_until

STATE: Final = CHECKOUT / ".cache" / "cluster"
GUEST_IP: Final = "10.0.2.15"
API_PORT: Final = 6443
SERVICE_CIDR: Final = "10.96.0.0/16"
KUBERNETES_SERVICE_IP: Final = "10.96.0.1"
NODE_LABEL: Final = "nri-podlevel.io/enabled=true"
NAMESPACE: Final = "nri-podlevel"
GUEST_BASE: Final = Path("/run/nri-podlevel-cluster")
"""In the guest: containerd's, etcd's and the kubelet's directories, on a tmpfs: overlayfs snapshots cannot
have the guest's root, itself an overlay, as their upper layer."""
KUBELET_ROOT: Final = Path("/var/lib/kubelet")
NRI_SOCKET_DIR: Final = Path("/var/run/nri")
PRELOADED: Final = {PAUSE_IMAGE: "registry.k8s.io/pause:3.9"}
"""The test bed's image -> the name deploy/examples pulls (IfNotPresent: a tag other than latest)."""
FEATURE_GATES: Final = "PodLevelResources=true"
"""README's Installing: the gate on the API server, the scheduler and the kubelet."""
BOOT_TIMEOUT_S: Final = 1200.0
"""Guest boot, containerd, every component under TCG, the node Ready; the image import adds minutes."""
COMPONENT_TIMEOUT_S: Final = 300.0
IMPORT_TIMEOUT_S: Final = 1200.0
ROLLOUT_TIMEOUT: Final = "600s"
STOP_TIMEOUT_S: Final = 60.0
GUEST_SHAPE: Final = {"numa_nodes": 2, "cpus": 8, "threads_per_core": 2, "memory": "12G"}


class ClusterError(RuntimeError):
    """The cluster could not be brought up or down; the message names the component and its last log line."""


@dataclass(frozen=True)
class Layout:
    """Where everything of one cluster lives under its state directory (shared with the guest)."""

    state: Path

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def settings(self) -> Path:
        return self.state / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        """An admin's, for the host: the API server through the forwarded port."""
        return self.state / "admin.kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.state / f"{component}.kubeconfig"

    @property
    def ready(self) -> Path:
        return self.state / "ready"

    @property
    def failed(self) -> Path:
        return self.state / "failed"

    @property
    def pid(self) -> Path:
        return self.state / "vm.pid"

    @property
    def vm_log(self) -> Path:
        return self.logs / "vm.log"


def last_line(path: Path) -> str:
    """A log's last non-empty line, or a note that there is none."""
    with contextlib.suppress(OSError):
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1][-500:]
    return f"({path.name} is empty or missing)"


# -- certificates and kubeconfigs ------------------------------------------------------------------------

CLIENTS: Final = {
    # component -> (user, groups): what the API server's authorizers (Node, RBAC) know them by
    "admin": ("kubernetes-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kubelet": (f"system:node:{NODE_NAME}", ("system:nodes",)),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
}


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "nri-podlevel-test",
        "clusters": [{"name": "nri-podlevel-test",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "nri-podlevel-test",
                      "context": {"cluster": "nri-podlevel-test", "user": user}}],
    }


def make_pki(layout: Layout, host_port: int) -> None:
    """The CA, the API server's serving pair, a client pair per component, the service account key; the
    kubeconfigs of the components (guest loopback) and the admin's for the host (the forwarded port)."""
    ca = TestCA(layout.pki, "nri-podlevel test cluster CA")
    ca.issue("kube-apiserver", stem="apiserver", hosts=(
        "127.0.0.1", "localhost", GUEST_IP, KUBERNETES_SERVICE_IP, "kubernetes", "kubernetes.default",
        "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"))
    key = ec.generate_private_key(ec.SECP256R1())
    (layout.pki / "service-account.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    (layout.pki / "service-account.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for component, (user, groups) in CLIENTS.items():
        files = ca.issue_client(user, groups, stem=component)
        if component == "apiserver-kubelet-client":
            continue
        guest = kubeconfig(f"https://127.0.0.1:{API_PORT}", ca.ca_file, files.cert_file, files.key_file, user)
        layout.component_kubeconfig(component).write_text(yaml.safe_dump(guest, sort_keys=False))
    admin = kubeconfig(f"https://127.0.0.1:{host_port}", ca.ca_file, layout.pki / "admin.crt",
                       layout.pki / "admin.key", CLIENTS["admin"][0])
    layout.kubeconfig.write_text(yaml.safe_dump(admin, sort_keys=False))


# -- the guest: the node and its control plane -----------------------------------------------------------


class Component:
    """One control-plane process, its output in `logs/NAME.log`; it ends with the guest."""

    def __init__(self, name: str, argv: Sequence[str], layout: Layout) -> None:
        self.name = name
        self.log = layout.logs / f"{name}.log"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, probe: Any, timeout: float = COMPONENT_TIMEOUT_S) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise ClusterError(f"{self.name} exited with status {self.process.returncode}; its last log "
                                   f"line: {last_line(self.log)}")
            return bool(probe())
        try:
            wait_until(ready, timeout, f"{self.name} ready")
        except DeadlineExceeded as exc:
            raise ClusterError(f"{self.name} was not ready within {timeout:.0f} s; its last log line: "
                               f"{last_line(self.log)}") from exc


def url_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """GET `url`; True on 200."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def client_context(layout: Layout) -> ssl.SSLContext:
    """TLS as the admin: the cluster's CA trusted, the admin's client certificate shown."""
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.load_cert_chain(layout.pki / "admin.crt", layout.pki / "admin.key")
    return context


def self_signed_context() -> ssl.SSLContext:
    """For a component's own healthz, served with the certificate it made itself."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def api_request(layout: Layout, path: str, body: Any = None) -> Any:
    """GET `path`, or POST `body`, as the admin on the guest's loopback."""
    request = urllib.request.Request(f"https://127.0.0.1:{API_PORT}{path}",
                                     method="GET" if body is None else "POST",
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=client_context(layout), timeout=10) as answer:
        return json.load(answer)


def node_ready(layout: Layout) -> bool:
    try:
        node = api_request(layout, f"/api/v1/nodes/{NODE_NAME}")
    except (urllib.error.URLError, OSError, ValueError):
        return False
    conditions = node.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def control_plane(layout: Layout, tools: dict[str, Path], base: Path) -> None:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler, each ready before the next (they run
    until the guest powers off)."""
    pki = layout.pki
    etcd = Component("etcd", [
        str(tools["etcd"] / "etcd"), "--name", "node-1", "--data-dir", str(base / "etcd"),
        "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
        "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
        "--initial-cluster", "node-1=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:2381",
    ], layout)
    etcd.wait_ready(lambda: url_ok("http://127.0.0.1:2381/health"))
    binaries = tools["kubernetes"]
    apiserver = Component("kube-apiserver", [
        str(binaries / "kube-apiserver"), "--etcd-servers", "http://127.0.0.1:2379",
        "--bind-address", "0.0.0.0", f"--secure-port={API_PORT}", "--advertise-address", GUEST_IP,
        "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
        "--client-ca-file", str(pki / "ca.crt"),
        "--kubelet-client-certificate", str(pki / "apiserver-kubelet-client.crt"),
        "--kubelet-client-key", str(pki / "apiserver-kubelet-client.key"),
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", str(pki / "service-account.pub"),
        "--service-account-signing-key-file", str(pki / "service-account.key"),
        "--service-cluster-ip-range", SERVICE_CIDR, "--authorization-mode", "Node,RBAC",
        "--enable-admission-plugins", "NodeRestriction", "--allow-privileged=true",
        # No kube-proxy on this node: the API server reaches webhooks at their endpoints, not the service IP.
        "--enable-aggregator-routing=true", f"--feature-gates={FEATURE_GATES}",
        # The node's name resolves nowhere (no DNS here): `kubectl exec` and `logs` dial its address.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
    ], layout)
    apiserver.wait_ready(lambda: url_ok(f"https://127.0.0.1:{API_PORT}/readyz", client_context(layout)))
    for name, argv in (
        ("kube-controller-manager", [
            "--service-account-private-key-file", str(pki / "service-account.key"),
            "--root-ca-file", str(pki / "ca.crt"), "--use-service-account-credentials=true",
            "--controllers=*,-csrsigning", "--secure-port=10257"]),
        ("kube-scheduler", ["--secure-port=10259"]),
    ):
        config = str(layout.component_kubeconfig(name))
        component = Component(name, [
            str(binaries / name), "--kubeconfig", config, "--authentication-kubeconfig", config,
            "--authorization-kubeconfig", config, "--leader-elect=false", "--bind-address", "127.0.0.1",
            f"--feature-gates={FEATURE_GATES}", *argv], layout)
        port = argv[-1].rpartition("=")[2]  # its --secure-port
        healthz = f"https://127.0.0.1:{port}/healthz"
        component.wait_ready(lambda healthz=healthz: url_ok(healthz, self_signed_context()))


def kubelet_settings(layout: Layout) -> dict[str, Any]:
    """README's node settings (deploy/node/kubelet-config.yaml: the managers off, the gate on; cgroupfs, as
    the test bed's containerd) on a node an API server reaches: x509 clients of the cluster's CA, webhook
    authorization."""
    return {
        **MANAGERS_OFF, "featureGates": {"PodLevelResources": True},
        "address": "0.0.0.0", "syncFrequency": "1m",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(layout.pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
    }


def publish(path: Path, text: str) -> None:
    """Write a file the host polls for whole: it exists only with all of its content."""
    staging = path.with_name(path.name + ".new")
    staging.write_text(text)
    staging.replace(path)


def guest(layout: Layout) -> int:
    """In the guest: containerd, the control plane and the kubelet; `ready` when the node is Ready, then
    run until the host stops the guest (a failure returns, and the guest powers off)."""
    settings = json.loads(layout.settings.read_text())
    tools = {name: Path(path) for name, path in settings["tools"].items()}
    try:
        GUEST_BASE.mkdir(parents=True, exist_ok=True)
        ctrd = Containerd(settings["flavour"], GUEST_BASE / "containerd", pod_network=True)
        ctrd.nri_socket.parent.mkdir(parents=True, exist_ok=True)
        NRI_SOCKET_DIR.parent.mkdir(parents=True, exist_ok=True)
        NRI_SOCKET_DIR.symlink_to(ctrd.nri_socket.parent)
        ctrd.log_path = layout.logs / "containerd.log"
        ctrd.start()
        # No registry: the images deploy/examples names are the test bed's, tagged as an air-gapped node's
        # are preloaded.
        for source, name in PRELOADED.items():
            subprocess.run([*ctrd.ctr_command(), "images", "tag", "--force", source, name], check=True,
                           capture_output=True, timeout=60)
        # The image's import takes minutes under TCG: beside the control plane's start, not before it.
        importer = None
        if settings["image_archives"]:
            imports = " && ".join(shlex.join([*ctrd.ctr_command(), "images", "import", archive])
                                  for archive in settings["image_archives"])
            with (layout.logs / "image-import.log").open("ab") as out:
                importer = subprocess.Popen(["sh", "-c", imports], stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT)
        control_plane(layout, tools, GUEST_BASE)
        kubelet = RealKubelet(tools["kubelet"] / "kubelet", ctrd, GUEST_BASE / "kubelet",
                              kubelet_settings(layout), kubeconfig=layout.component_kubeconfig("kubelet"))
        kubelet.root_dir = KUBELET_ROOT
        # The Node exists before its kubelet starts: a kubelet whose first registration takes longer than
        # its CSINode set-up retries (seconds; under TCG it takes tens) reports the error, NotReady, until it
        # is restarted. Registering then finds the object and takes it over, as after a kubelet restart.
        api_request(layout, "/api/v1/nodes",
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME}})
        kubelet.log_path = layout.logs / "kubelet.log"
        kubelet.start()
        try:
            wait_until(lambda: node_ready(layout), COMPONENT_TIMEOUT_S, f"node {NODE_NAME} Ready")
        except DeadlineExceeded as exc:
            raise ClusterError(f"the kubelet's node {NODE_NAME} was not Ready within "
                               f"{COMPONENT_TIMEOUT_S:.0f} s; its last log line: "
                               f"{last_line(kubelet.log_path)}") from exc
        if importer is not None and importer.wait(timeout=IMPORT_TIMEOUT_S) != 0:
            raise ClusterError(f"importing {', '.join(settings['image_archives'])} failed: "
                               f"{last_line(layout.logs / 'image-import.log')}")
    except Exception as exc:  # the host shows it as the reason `up` failed
        publish(layout.failed, f"{exc}\n")
        return 1
    publish(layout.ready, json.dumps({"node": NODE_NAME, "containerd": ctrd.versions}) + "\n")
    while True:
        signal.pause()  # until `down` stops the guest: everything here is in its memory


# -- the host: up, status, down --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def running_pid(layout: Layout) -> int | None:
    try:
        pid = int(layout.pid.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def kubectl_path(layout: Layout) -> Path:
    return Path(json.loads(layout.settings.read_text())["tools"]["kubernetes"]) / "kubectl"


def assignments(layout: Layout) -> dict[str, str]:
    return {"KUBECONFIG": str(layout.kubeconfig), "KUBECTL": str(kubectl_path(layout)),
            "CLUSTER_STATE": str(layout.state), "CLUSTER_NODE": NODE_NAME}


def up(layout: Layout, *, flavour: str, install: bool, images: Sequence[Path] = ()) -> None:
    """Boot the node and its control plane; with `install`, deploy/ too. `images` (OCI archives) are
    imported into the node's containerd besides the one `install` builds."""
    if running_pid(layout) is not None:
        raise ClusterError(f"a cluster of {layout.state} already runs (vm-run pid {running_pid(layout)}); "
                           "hack/cluster down first")
    shutil.rmtree(layout.state, ignore_errors=True)
    layout.logs.mkdir(parents=True)
    tools = build_tools("etcd", "kubernetes", "kubelet")
    Containerd(flavour).fetch()  # the guest has no network: containerd comes from the host's cache
    archives = [str(agent_image.build().archive)] if install else []
    archives += [str(image) for image in images]
    host_port = free_port()
    make_pki(layout, host_port)
    layout.settings.write_text(json.dumps({
        "flavour": flavour, "host_port": host_port, "image_archives": archives,
        "tools": {name: str(path) for name, path in tools.items()}}, indent=1) + "\n")
    shape = GUEST_SHAPE
    command = [
        sys.executable, "-m", "testbed.vm", "--numa-nodes", str(shape["numa_nodes"]),
        "--cpus", str(shape["cpus"]),
        "--threads-per-core", str(shape["threads_per_core"]), "--memory", str(shape["memory"]),
        "--timeout", str(7 * 24 * 3600), "--forward", f"{host_port}:{API_PORT}", "--",
        "env", f"PYTHONPATH={CHECKOUT / 'tests'}", sys.executable, "-m", "testbed.cluster", "guest",
        "--state", str(layout.state)]
    env = dict(os.environ, PYTHONPATH=str(CHECKOUT / "tests"))
    with layout.vm_log.open("ab") as out:
        vm = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              cwd=CHECKOUT, env=env, start_new_session=True)
    layout.pid.write_text(f"{vm.pid}\n")
    try:
        wait_until(lambda: _guest_up(layout, vm), BOOT_TIMEOUT_S, "the cluster's node Ready")
    except (DeadlineExceeded, ClusterError) as exc:
        reason = layout.failed.read_text().strip() if layout.failed.exists() else str(exc)
        down(layout, keep_logs=True)
        raise ClusterError(f"the cluster did not come up: {reason}; logs in {layout.logs}") from exc
    if install:
        try:
            install_deploy(layout)
        except ClusterError:
            raise
        except subprocess.CalledProcessError as exc:
            raise ClusterError(f"{shlex.join(map(str, exc.cmd))} failed: "
                               f"{(exc.stderr or '').strip()}") from exc


def _guest_up(layout: Layout, vm: subprocess.Popen[bytes]) -> bool:
    if layout.failed.exists():
        raise ClusterError(layout.failed.read_text().strip())
    if vm.poll() is not None:
        raise ClusterError(f"the guest exited ({vm.returncode}): {last_line(layout.vm_log)}")
    return layout.ready.exists()


def kubectl(layout: Layout, *args: str, stdin: str | None = None, timeout: float = 900) -> str:
    """kubectl with the admin's kubeconfig; raises CalledProcessError with the server's message."""
    done = subprocess.run([str(kubectl_path(layout)), "--kubeconfig", str(layout.kubeconfig), *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["kubectl", *args], done.stdout, done.stderr)
    return done.stdout


def install_deploy(layout: Layout, overlay: str = "script-certs") -> None:
    """README's Installing: the node labelled, `kubectl apply -k` of the overlay, the webhook's
    certificate by hack/webhook-certs, both workloads rolled out."""
    kubectl(layout, "label", "node", NODE_NAME, NODE_LABEL, "--overwrite")
    kubectl(layout, "apply", "-k", str(CHECKOUT / "deploy" / "overlays" / overlay))
    webhook_certificate(layout)
    for workload in ("daemonset/nri-podlevel", "deployment/nri-podlevel-webhook"):
        kubectl(layout, "-n", NAMESPACE, "rollout", "status", workload, f"--timeout={ROLLOUT_TIMEOUT}")


def webhook_certificate(layout: Layout) -> None:
    """`hack/webhook-certs` against the cluster, with the built kubectl first on PATH."""
    env = dict(os.environ, KUBECONFIG=str(layout.kubeconfig),
               PATH=f"{kubectl_path(layout).parent}:{os.environ.get('PATH', os.defpath)}")
    done = subprocess.run([str(CHECKOUT / "hack" / "webhook-certs")], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise ClusterError(f"hack/webhook-certs failed: {done.stderr.strip()}")


def down(layout: Layout, *, keep_logs: bool = False) -> None:
    """Stop the guest and remove the state directory (its logs kept if asked). Nothing in the guest needs
    an orderly stop (it all lives in the guest's memory): vm-run is sent SIGTERM and stops QEMU by its PID."""
    pid = running_pid(layout)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        try:
            wait_until(lambda: _reap(pid), STOP_TIMEOUT_S, "vm-run to exit")
        except DeadlineExceeded as exc:
            raise ClusterError(f"vm-run (pid {pid}) did not exit {STOP_TIMEOUT_S:.0f} s after SIGTERM; "
                               f"its log: {last_line(layout.vm_log)}") from exc
    if keep_logs:
        for entry in layout.state.iterdir():
            if entry != layout.logs and entry != layout.failed:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    else:
        shutil.rmtree(layout.state, ignore_errors=True)


def _reap(pid: int) -> bool:
    """True once `pid` is gone (reaped here when it is this process's child)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "status", "down", "guest"])
    parser.add_argument("--install", action="store_true", help="build the image and install deploy/ (up)")
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), default="2", help="the node's containerd")
    parser.add_argument("--state", type=Path, default=STATE, help=f"state directory (default {STATE})")
    args = parser.parse_args(argv)
    layout = Layout(args.state.resolve())
    try:
        if args.command == "guest":
            return guest(layout)
        if args.command == "up":
            up(layout, flavour=args.flavour, install=args.install)
        elif args.command == "down":
            down(layout)
            return 0
        elif running_pid(layout) is None:
            print(f"cluster: none runs from {layout.state}", file=sys.stderr)
            return 1
        for key, value in assignments(layout).items():
            print(f"export {key}={shlex.quote(value)}")  # exported: kubectl and helm read KUBECONFIG
        return 0
    except ClusterError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
