"""A private containerd with CRI and NRI for tests and the demo, confined to one base directory.

Invariants:
- Every path containerd, its shims and runc write (root, state, sockets, runc state, opt, NRI plugin dirs,
  pod logs) is under `base`, except the shim sockets in /run/containerd/s (compiled in; the ones this
  instance leaves are removed) and the pod cgroups, which live only under `cgroup_root`, a top-level
  cgroup name derived from `base` so no two test beds (or the host) share one.
- Processes are stopped by PID: containerd by the PID it was started with (checked against its command
  line), shims only when their `-address` is this instance's socket, containers only through this
  instance's runc root. Nothing started elsewhere is signalled.
- Readiness is a condition polled with a deadline (both sockets accept, CRI answers Version), never a sleep.

Flavours: "2" is Debian sid's containerd 2.x (config version 3, NRI on by default); "1.7" is Debian
trixie's containerd 1.7 (config version 2, NRI enabled explicitly); both use the host's runc (bookworm's
1.1.5; the newer Debian runc needs a newer glibc). "2.4" is containerd's newest release with a runc 1.5, both
built from the Go module proxy (`hack/build-go-tools`; config version 3). All use the cgroupfs driver and
`restrict_oom_score_adj`, without
which runc fails where CAP_SYS_RESOURCE is not in the bounding set. By default there is no CNI (host-network
pods only); `pod_network=True` adds one with Debian's CNI plugins: each pod gets a network namespace (mounted
under `base`) and an address of a /24 private to this instance, reached from the host over a point-to-point
veth (`ptp`), with no NAT and no bridge. The ptp plugin turns IPv4 forwarding on; stop() puts back the value
it found.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from testbed import CHECKOUT, images
from testbed.cri import CRI, CRIError, pod_cgroup_parent
from testbed.go_tools import GoToolError, build_tools
from testbed.wait import DeadlineExceeded, wait_until

log = logging.getLogger(__name__)

CACHE_DIR: Final = CHECKOUT / ".cache"
FETCH_DEBS: Final = CHECKOUT / "hack" / "fetch-debs"
HOST_RUNC: Final = Path("/usr/sbin/runc")
CRI_NAMESPACE: Final = "k8s.io"
SHIM_BINARY: Final = "containerd-shim-runc-v2"
SHIM_SOCKET_DIR: Final = Path("/run/containerd/s")
CGROUP_MOUNT: Final = Path("/sys/fs/cgroup")
CNI_PLUGINS: Final = Path("/usr/lib/cni")
IP_FORWARD: Final = Path("/proc/sys/net/ipv4/ip_forward")
# sun_path is 108 bytes including the terminating NUL.
UNIX_PATH_MAX: Final = 107
START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 15.0
# A shim exits on its own once containerd deleted its last task; give it this long before killing it.
SHIM_EXIT_TIMEOUT_S: Final = 5.0
# Two downloads (apt lists and ~30 MB of debs) with fetch-debs' own per-step timeouts inside.
FETCH_TIMEOUT_S: Final = 900.0
_MNT_DETACH: Final = 2


class ContainerdError(RuntimeError):
    """The test bed could not be fetched, started or cleaned up."""


@dataclass(frozen=True)
class Flavour:
    """A containerd release line: where it comes from (a Debian package, or `go` for a release built from the
    Go module proxy with its own runc) and which config layout it reads."""

    name: str
    package: str
    config_version: int
    nri_validator: bool = False
    """Its NRI carries the default validator (NRI v0.12): the test bed turns it on as
    deploy/node/containerd-nri-validator.toml ships it."""

    @property
    def built(self) -> bool:
        return self.package == "go"


FLAVOURS: Final = {
    "2": Flavour("2", "containerd/sid", 3),
    "1.7": Flavour("1.7", "containerd/trixie", 2),
    "2.4": Flavour("2.4", "go", 3, nri_validator=True),
}


def nri_validator() -> dict[str, bool]:
    """The default validator's settings deploy/node ships, which the flavours that have it run with."""
    snippet = tomllib.loads((CHECKOUT / "deploy" / "node" / "containerd-nri-validator.toml").read_text())
    table: dict[str, bool] = snippet["plugins"]["io.containerd.nri.v1.nri"]["default_validator"]
    return table


def default_base(flavour: str) -> Path:
    """Where `hack/containerd-env` keeps an instance when no --base is given."""
    return Path(f"/tmp/nri-podlevel-containerd-{flavour}")


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie has released its cgroups and mounts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


def _accepts(path: Path) -> bool:
    """True if a server is listening on the unix socket (a leftover socket file alone does not count)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def shim_socket(argv: list[str]) -> Path | None:
    """The socket a runc v2 shim serves on, from its command line: containerd names it by hashing the
    shim's `-address`, `-namespace` and `-id` into /run/containerd/s, outside any configurable path."""
    options = dict(zip(argv[1::2], argv[2::2], strict=False))
    if not {"-address", "-namespace", "-id"} <= options.keys():
        return None
    key = os.path.join(options["-address"], options["-namespace"], options["-id"])
    return SHIM_SOCKET_DIR / hashlib.sha256(key.encode()).hexdigest()


def mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))
    return points


def unmount_under(base: Path) -> None:
    """Unmount everything mounted below `base`, deepest first (lazily when busy); failures are logged."""
    libc = ctypes.CDLL(None, use_errno=True)
    prefix = f"{base}/"
    for point in sorted((m for m in mount_points() if m.startswith(prefix)), reverse=True):
        if libc.umount2(point.encode(), 0) != 0 and libc.umount2(point.encode(), _MNT_DETACH) != 0:
            log.warning("cannot unmount %s: %s", point, os.strerror(ctypes.get_errno()))


def cgroup_mounts() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers, the v2 unified tree, or a pure v2 root)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            mounts.append(Path(fields[4]))
    return mounts


class Containerd:
    """One private containerd instance; a context manager that starts it and always cleans up.

    `with Containerd("2", base) as ctrd:` fetches the binaries (cached), writes the config, starts
    containerd, waits for CRI and NRI, imports the pause and busybox images, and on exit removes every
    pod, stops containerd and removes whatever it left. `start`/`restart`/`stop` are the same steps for
    callers that manage the lifetime themselves (hack/containerd-env starts in one process and stops in
    another: the PID is kept in `base/containerd.pid`).
    """

    def __init__(self, flavour: str = "2", base: Path | str | None = None, *, cache: Path | None = None,
                 runc: Path = HOST_RUNC, snapshotter: str = "overlayfs", log_level: str = "info",
                 pod_network: bool = False) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"containerd flavour must be one of {sorted(FLAVOURS)}, got {flavour!r}")
        self.flavour = FLAVOURS[flavour]
        self.base = Path(base if base is not None else default_base(flavour)).resolve()
        self.cache = (cache or CACHE_DIR / f"containerd-{flavour}").resolve()
        self.runc = runc
        self.snapshotter = snapshotter
        self.log_level = log_level
        self.bin_dir = self.cache / "root" / "usr" / "bin"
        if self.flavour.built:
            self._build()  # its own runc, which `stop` in another process must use too
        self.config_path = self.base / "config.toml"
        self.log_path = self.base / "containerd.log"
        self.pid_path = self.base / "containerd.pid"
        self.cri_socket = self.base / "containerd.sock"
        self.nri_socket = self.base / "nri" / "nri.sock"
        self.nri_plugin_dir = self.base / "nri" / "plugins"
        self.nri_conf_dir = self.base / "nri" / "conf.d"
        self.runc_root = self.base / "runc"
        self.pod_log_dir = self.base / "pod-logs"
        self.image_dir = CACHE_DIR / "testbed-images"
        base_digest = hashlib.sha256(str(self.base).encode()).hexdigest()[:8]
        self.cgroup_root = f"/nri-podlevel-test-{base_digest}.slice"
        self.pod_network = pod_network
        self.pod_subnet = f"10.233.{int(base_digest[:2], 16)}.0/24"
        self._ip_forward: str | None = None
        self.versions: dict[str, str] = {}
        self._process: subprocess.Popen[bytes] | None = None
        for path in (self.cri_socket, self.nri_socket, Path(str(self.cri_socket) + ".ttrpc")):
            if len(str(path).encode()) > UNIX_PATH_MAX:
                raise ContainerdError(f"socket path {path} is longer than the {UNIX_PATH_MAX} bytes a unix "
                                      "socket address holds; choose a shorter base directory")
        if "'" in str(self.base) or "\n" in str(self.base):
            raise ContainerdError(f"base directory {self.base!r} must not contain quotes or newlines (TOML)")

    def __repr__(self) -> str:
        return f"Containerd(flavour={self.flavour.name!r}, base={str(self.base)!r})"

    def __enter__(self) -> Containerd:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- fetching and configuration ------------------------------------------------------------------

    def fetch(self) -> None:
        """Download and unpack this flavour's containerd once into the cache (hack/fetch-debs), or build it
        and its runc from the Go module proxy (hack/build-go-tools; a second call builds nothing)."""
        if self.flavour.built:
            self._build()
            return
        if all((self.bin_dir / name).exists() for name in ("containerd", SHIM_BINARY, "ctr")):
            return
        self.cache.mkdir(parents=True, exist_ok=True)
        with (self.cache / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                done = subprocess.run([str(FETCH_DEBS), "--cache", str(self.cache), self.flavour.package],
                                      capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired as exc:
                raise ContainerdError(f"downloading {self.flavour.package} took longer than "
                                      f"{FETCH_TIMEOUT_S:g}s; is a Debian mirror reachable?") from exc
        if done.returncode != 0:
            said = done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}"
            raise ContainerdError(f"cannot download containerd {self.flavour.name} ({self.flavour.package}) "
                                  f"with hack/fetch-debs: {said}{self._apt_problems()}")
        missing = [name for name in ("containerd", SHIM_BINARY, "ctr") if not (self.bin_dir / name).exists()]
        if missing:
            raise ContainerdError(f"{self.flavour.package} unpacked into {self.cache} lacks {missing}")

    def _build(self) -> None:
        try:
            built = build_tools("containerd", "runc")
        except GoToolError as exc:
            raise ContainerdError(f"cannot build containerd {self.flavour.name}: {exc}") from exc
        self.bin_dir = built["containerd"]
        if self.runc == HOST_RUNC:
            self.runc = built["runc"] / "runc"

    def _apt_problems(self) -> str:
        """apt's warnings and errors from the last package list update: apt-get update exits 0 when a
        mirror is unreachable, so the reason is often only in its log."""
        try:
            lines = (self.cache / "apt" / "update.log").read_text().splitlines()
        except OSError:
            return ""
        problems = [line for line in lines if line.startswith(("E:", "W:"))]
        return "; apt-get update said:\n" + "\n".join(problems) if problems else ""

    def config(self) -> str:
        """The containerd config for this flavour, every path under `base`."""
        b = self.base
        common_head = f"""version = {self.flavour.config_version}
root = '{b}/root'
state = '{b}/state'

[grpc]
  address = '{self.cri_socket}'

[ttrpc]
  address = '{self.cri_socket}.ttrpc'

[debug]
  level = '{self.log_level}'

[plugins]
  # without a path the opt plugin creates /opt/containerd
  [plugins.'io.containerd.internal.v1.opt']
    path = '{b}/opt'

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = '{self.nri_socket}'
    plugin_path = '{self.nri_plugin_dir}'
    plugin_config_path = '{self.nri_conf_dir}'
    plugin_registration_timeout = '5s'
    plugin_request_timeout = '2s'
"""
        if self.flavour.nri_validator:
            common_head += "    [plugins.'io.containerd.nri.v1.nri'.default_validator]\n" + "".join(
                f"      {key} = {str(value).lower()}\n" for key, value in nri_validator().items())
        runtime = f"""default_runtime_name = 'runc'
      [{{cri}}.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [{{cri}}.containerd.runtimes.runc.options]
          BinaryName = '{self.runc}'
          Root = '{self.runc_root}'
          SystemdCgroup = false"""
        # Port 0: the exec/attach streaming server must not collide with another test bed's on 10010.
        if self.flavour.config_version == 3:
            cri = "plugins.'io.containerd.cri.v1.runtime'"
            return common_head + f"""
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = '{self.snapshotter}'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{images.PAUSE_IMAGE}'

  [{cri}]
    enable_cdi = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [{cri}.containerd]
      {runtime.format(cri=cri)}
    [{cri}.cni]
      bin_dirs = ['{b}/cni/bin']
      conf_dir = '{b}/cni/net.d'

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
"""
        cri = "plugins.'io.containerd.grpc.v1.cri'"
        return common_head + f"""
  [{cri}]
    sandbox_image = '{images.PAUSE_IMAGE}'
    enable_cdi = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
    [{cri}.containerd]
      snapshotter = '{self.snapshotter}'
      {runtime.format(cri=cri)}
    [{cri}.cni]
      bin_dir = '{b}/cni/bin'
      conf_dir = '{b}/cni/net.d'
"""

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of this instance's containerd if it runs (checked against its command line), else None."""
        try:
            pid = int(self.pid_path.read_text())
        except (OSError, ValueError):
            return None
        if _alive(pid) and str(self.config_path) in _cmdline(pid):
            return pid
        return None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self) -> None:
        """Fetch, configure, start, wait until CRI and NRI answer, import the images, record versions."""
        if self.running:
            raise ContainerdError(f"containerd for {self.base} already runs as pid {self.pid}")
        if not self.runc.exists():
            raise ContainerdError(f"runc {self.runc} is missing (hack/setup installs the host's)")
        self.fetch()
        for sub in ("root", "state", "opt", "runc", "nri/plugins", "nri/conf.d", "cni/bin", "cni/net.d",
                    "pod-logs"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config())
        if self.pod_network:
            self._configure_cni()
        self._launch()
        images.import_images(self.ctr_command(), self.image_dir, self.snapshotter)
        self.versions = self._read_versions()
        log.info("containerd test bed %s up: %s", self.base, self.versions)

    def restart(self) -> None:
        """Stop containerd by PID keeping its state, then start it again; containers keep running."""
        self.stop_daemon()
        self.start_daemon()

    def stop_daemon(self) -> None:
        """Stop containerd by PID keeping its state (a runtime outage: containers keep running)."""
        self._terminate()

    def start_daemon(self) -> None:
        """Start containerd again after `stop_daemon`, waiting until CRI and NRI answer."""
        self._launch()

    def stop(self) -> None:
        """Remove all pods through CRI, stop containerd and clear everything this instance left behind.

        Every step runs even if an earlier one failed; raises ContainerdError at the end if anything
        (a process, mount or cgroup) is still there.
        """
        if self.running:
            try:
                with self.cri() as cri:
                    cri.remove_all()
                wait_until(lambda: not self.shim_pids(), SHIM_EXIT_TIMEOUT_S, "shims exit after pod removal")
            except (CRIError, DeadlineExceeded) as exc:
                log.warning("CRI cleanup of %s incomplete, forcing: %s", self.base, exc)
            self._terminate()
        self._delete_runc_containers()
        self._kill_shims()
        self._unmount()
        self._remove_cgroups()
        if self._ip_forward is not None:
            IP_FORWARD.write_text(self._ip_forward)
        left = self.leftovers()
        if left:
            raise ContainerdError(f"test bed {self.base} left behind: {'; '.join(left)}")

    def _configure_cni(self) -> None:
        """Debian's ptp, host-local and loopback plugins, and one network of them (module docstring)."""
        for plugin in ("ptp", "host-local", "loopback"):
            if not (CNI_PLUGINS / plugin).exists():
                raise ContainerdError(f"CNI plugin {CNI_PLUGINS / plugin} is missing (hack/setup installs "
                                      "containernetworking-plugins)")
            link = self.base / "cni" / "bin" / plugin
            link.unlink(missing_ok=True)
            link.symlink_to(CNI_PLUGINS / plugin)
        network = {"cniVersion": "1.0.0", "name": "testbed", "plugins": [{
            "type": "ptp", "ipMasq": False,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_subnet}]],
                     "dataDir": str(self.base / "cni" / "ipam")}}]}
        (self.base / "cni" / "net.d" / "10-testbed.conflist").write_text(json.dumps(network, indent=1))
        if self._ip_forward is None:
            self._ip_forward = IP_FORWARD.read_text()

    def _launch(self) -> None:
        for path in (self.cri_socket, Path(str(self.cri_socket) + ".ttrpc"), self.nri_socket):
            path.unlink(missing_ok=True)
        # containerd finds the shim on PATH; runc is pinned by absolute path in the config.
        env = dict(os.environ, PATH=f"{self.bin_dir}:{os.environ.get('PATH', os.defpath)}")
        with self.log_path.open("ab") as log_file:
            self._process = subprocess.Popen(
                [str(self.bin_dir / "containerd"), "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=self.base,
                start_new_session=True)
        self.pid_path.write_text(f"{self._process.pid}\n")
        try:
            wait_until(self._ready, START_TIMEOUT_S, f"containerd {self.flavour.name} CRI and NRI sockets")
        except DeadlineExceeded as exc:
            raise ContainerdError(f"{exc}; log tail:\n{self.log_tail()}") from exc

    def _ready(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise ContainerdError(f"containerd exited with status {self._process.returncode} while starting; "
                                  f"log tail:\n{self.log_tail()}")
        # The NRI socket is only checked to exist (stale ones were removed before the start): a probe
        # connection would look like a plugin that failed to register and be logged as an error.
        if not (self.nri_socket.is_socket() and _accepts(self.cri_socket)):
            return False
        with self.cri() as cri:
            try:
                cri.version(timeout=2)
            except CRIError:
                return False
        return True

    def _terminate(self) -> None:
        pid = self.pid
        if pid is None:
            return
        for sig, timeout in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            try:
                wait_until(lambda: self._reaped(pid), timeout, f"containerd pid {pid} exits after {sig.name}")
                break
            except DeadlineExceeded:
                if sig == signal.SIGKILL:
                    raise
        self.pid_path.unlink(missing_ok=True)
        self._process = None

    def _reaped(self, pid: int) -> bool:
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is not None
        return not _alive(pid)

    # -- clients ---------------------------------------------------------------------------------------

    def cri(self) -> CRI:
        """A kubelet-like CRI client on this instance's socket (close it, or use it as a context manager)."""
        return CRI(self.cri_socket, log_dir=self.pod_log_dir, cgroup_root=self.cgroup_root)

    def ctr_command(self) -> list[str]:
        """Command prefix for `ctr` on this instance in the CRI namespace."""
        return [str(self.bin_dir / "ctr"), "--address", str(self.cri_socket), "--namespace", CRI_NAMESPACE]

    def pod_cgroup_parent(self, uid: str, qos: str = "guaranteed") -> str:
        """A kubelet-shaped pod cgroup under this test bed's own cgroup root (cri.pod_cgroup_parent)."""
        return pod_cgroup_parent(self.cgroup_root, uid, qos)

    # -- what this instance owns on the host -----------------------------------------------------------

    def shim_pids(self) -> list[int]:
        """Live shims serving this instance (matched by the `-address` argument they were started with)."""
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            argv = _cmdline(int(proc.name))
            if (argv and os.path.basename(argv[0]) == SHIM_BINARY and "-address" in argv
                    and argv[argv.index("-address") + 1:][:1] == [str(self.cri_socket)]
                    and _alive(int(proc.name))):
                pids.append(int(proc.name))
        return pids

    def shim_sockets(self) -> list[Path]:
        """The sockets of this instance's live shims (a shim removes its own when it exits cleanly)."""
        return [path for pid in self.shim_pids() if (path := shim_socket(_cmdline(pid))) is not None]

    def _runc_roots(self) -> list[Path]:
        return sorted(p for p in self.runc_root.iterdir() if p.is_dir()) if self.runc_root.is_dir() else []

    def runc_containers(self) -> dict[str, int]:
        """Container id -> init PID of everything runc still knows in this instance's runc root."""
        found = {}
        for root in self._runc_roots():
            listing = subprocess.run([str(self.runc), "--root", str(root), "list", "--format", "json"],
                                     capture_output=True, text=True, check=False)
            if listing.returncode == 0 and listing.stdout.strip() not in ("", "null"):
                found.update({c["id"]: int(c["pid"]) for c in json.loads(listing.stdout)})
        return found

    def mounts(self) -> list[str]:
        """Mount points under `base`, deepest first."""
        prefix = f"{self.base}/"
        return sorted((m for m in mount_points() if m.startswith(prefix)), reverse=True)

    def cgroup_dirs(self) -> list[Path]:
        """Cgroup directories under `cgroup_root` in every hierarchy, deepest first."""
        found: list[Path] = []
        for mount in cgroup_mounts():
            top = mount / self.cgroup_root.lstrip("/")
            if top.is_dir():
                found.extend(Path(d) for d, _, _ in os.walk(top, topdown=False))
        return found

    def leftovers(self) -> list[str]:
        """Everything of this instance that is still alive or mounted: empty after a clean stop()."""
        left = []
        if self.running:
            left.append(f"containerd pid {self.pid}")
        left += [f"shim pid {pid}" for pid in self.shim_pids()]
        left += [f"container {cid} pid {pid}" for cid, pid in self.runc_containers().items() if _alive(pid)]
        left += [f"mount {m}" for m in self.mounts()]
        left += [f"cgroup {d}" for d in self.cgroup_dirs()]
        return left

    # -- forced cleanup --------------------------------------------------------------------------------

    def _delete_runc_containers(self) -> None:
        for root in self._runc_roots():
            listing = subprocess.run([str(self.runc), "--root", str(root), "list", "--quiet"],
                                     capture_output=True, text=True, check=False)
            for cid in listing.stdout.split():
                log.warning("force-deleting leftover container %s (runc root %s)", cid, root)
                subprocess.run([str(self.runc), "--root", str(root), "delete", "--force", cid],
                               capture_output=True, check=False)

    def _kill_shims(self) -> None:
        for pid in self.shim_pids():
            argv = _cmdline(pid)
            log.warning("killing leftover shim pid %d: %s", pid, " ".join(argv))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            socket_path = shim_socket(argv)
            if socket_path is not None:
                socket_path.unlink(missing_ok=True)
        wait_until(lambda: not self.shim_pids(), STOP_TIMEOUT_S, f"shims of {self.base} exit after SIGKILL")

    def _unmount(self) -> None:
        unmount_under(self.base)

    def _remove_cgroups(self) -> None:
        for directory in self.cgroup_dirs():
            try:
                directory.rmdir()
            except OSError as exc:
                log.warning("cannot remove cgroup %s: %s", directory, exc.strerror)

    # -- diagnostics -----------------------------------------------------------------------------------

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _read_versions(self) -> dict[str, str]:
        def first_line(*argv: str) -> str:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            return ((done.stdout or done.stderr).strip().splitlines() or ["unknown"])[0]

        versions = {"containerd": first_line(str(self.bin_dir / "containerd"), "--version"),
                    "runc": first_line(str(self.runc), "--version")}
        with contextlib.suppress(OSError):
            versions["package"] = (self.cache / "versions.txt").read_text().strip().splitlines()[-1]
        return versions
