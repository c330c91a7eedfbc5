"""Run a command inside a throw-away QEMU guest with cgroup v2 only and N NUMA nodes.

    hack/vm-run [--numa-nodes N] [--cpus C] [--threads-per-core T] [--memory SIZE] [--work DIR]
                [--timeout SECONDS] [--accel auto|kvm|tcg] [--forward HOST_PORT:GUEST_PORT]... -- CMD...

The guest boots Debian's own kernel (downloaded with `apt-get download` and unpacked into `.cache/vm/`; the
host's /boot is never touched) with `cgroup_no_v1=all`. Its root is the host's root, shared read-only over
9p under a tmpfs overlay: host binaries and the virtualenv run unchanged, and whatever the guest writes is
gone at power-off, except under the work directory (default: this checkout), which is shared writable at its
host path. CMD runs in the caller's working directory with the caller's PATH, its output streams to stdout
(stdout and stderr merged, as on a serial console), and vm-run exits with CMD's exit status.

Guest shape: N sockets, one NUMA node each (QEMU `-numa` with a memory backend per node, distances 10
local / 20 remote), C vCPUs numbered socket by socket, T SMT threads per core (`-cpu max,vendor=GenuineIntel`:
with the default AMD vendor, TCG shows no SMT siblings), SIZE split evenly over the nodes. The command sees
the shape in VM_NUMA_NODES, VM_CPUS, VM_THREADS_PER_CORE and VM_MEMORY (bytes).

KVM is used when it can run a stock kernel (vmx/svm in /proc/cpuinfo and /dev/kvm not provided by kvm_pvm,
which runs only PVM-guest kernels); otherwise TCG, about 8 s to a command. The choice, the boot time, the
total time and QEMU's peak RSS are printed on stderr. QEMU is stopped by its PID on timeout or interrupt;
no mount is made on the host (QEMU serves the shares). Exit status: CMD's, or 90 when the guest failed
before reporting one, 124 on timeout, 2 on bad usage, 128+signal when interrupted.

The guest has no network unless a port is forwarded: `--forward H:G` gives it a NIC on QEMU's restricted
user network (the guest is 10.0.2.15/24 and reaches nothing outside; host 127.0.0.1:H reaches guest port G),
for a service in the guest that host tools use (the test cluster's API server).

The kernel stays cached until `.cache/vm` is removed; the next run then takes Debian's current one.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import lzma
import os
import re
import resource
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from testbed import CHECKOUT

CACHE = CHECKOUT / ".cache/vm"
GUEST_INIT = CHECKOUT / "hack/vm-init"
READY = b"vm-run: guest ready "
# What the guest loads before it can mount its root: virtio PCI transport, 9p over virtio, overlayfs; veth,
# for the pods' network namespaces (the CNI ptp plugin); virtio_net, for --forward. Their own dependencies are
# found in the modules' .modinfo (the .deb ships no modules.dep).
GUEST_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay", "veth", "virtio_net")
MODULE_DIRS = ("drivers/virtio", "net/9p", "fs/9p", "fs/netfs", "fs/fscache", "fs/overlayfs", "drivers/net",
               "net/core")
KERNEL_ARGS = "console=ttyS1 quiet loglevel=3 panic=-1 cgroup_no_v1=all mitigations=off"
STOP_GRACE_S = 5.0
# A TCG guest is ready in 4-9 s on this kind of machine, 20-30 s when the host is loaded. Rarely a guest
# wedges under load (a kernel worker spins forever: "soft lockup ... stuck for 339s"), while booting or
# after: a guest not ready by the boot timeout, or whose kernel reports a CPU stuck for WEDGED_S, is killed
# and booted again (the command runs afresh in a fresh guest), at most BOOT_ATTEMPTS times.
BOOT_TIMEOUT_S = 120.0
BOOT_ATTEMPTS = 3
WEDGED_S = 120
WEDGE_CHECK_S = 5.0
_SOFT_LOCKUP = re.compile(r"soft lockup - CPU#\d+ stuck for (\d+)s")
EXIT_GUEST_FAILED, EXIT_TIMEOUT, EXIT_USAGE = 90, 124, 2


class UsageError(Exception):
    pass


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def log(message: str) -> None:
    print(f"vm-run: {message}", file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    """`4G`, `4Gi`, `512M`, `512Mi` or plain bytes -> bytes (binary units, as QEMU's -m reads them)."""
    match = re.fullmatch(r"(\d+)\s*([KMGT]?)i?[Bb]?", text.strip(), re.IGNORECASE)
    if not match:
        raise UsageError(f"--memory {text!r} is not a size such as 4G or 512M")
    number, unit = match.group(1), match.group(2)
    return int(number) << 10 * " KMGT".index(unit.upper() or " ")


def forward(text: str) -> tuple[int, int]:
    """`HOST_PORT:GUEST_PORT`, both in 1-65535."""
    try:
        host, guest = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST_PORT:GUEST_PORT") from None
    if not (0 < host < 65536 and 0 < guest < 65536):
        raise argparse.ArgumentTypeError(f"{text!r}: ports are 1-65535")
    return host, guest


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hack/vm-run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--numa-nodes", type=int, default=2, metavar="N", help="NUMA nodes, one socket each (default 2)")
    add("--cpus", type=int, default=4, metavar="C", help="vCPUs, a multiple of N x T (default 4)")
    add("--threads-per-core", type=int, default=2, metavar="T", help="SMT threads per core (default 2)")
    add("--memory", default="2G", metavar="SIZE", help="guest memory, split over the nodes (default 2G)")
    add("--work", type=Path, default=CHECKOUT, metavar="DIR", help="shared writable (default: this checkout)")
    add("--timeout", type=float, default=900.0, metavar="SECONDS", help="stop QEMU after this (default 900)")
    add("--boot-timeout", type=float, default=BOOT_TIMEOUT_S, metavar="SECONDS",
        help=f"boot again when the guest is not ready by then, {BOOT_ATTEMPTS} boots at most (%(default)s)")
    add("--accel", choices=("auto", "kvm", "tcg"), default="auto", help="default auto: KVM when usable")
    add("--forward", action="append", default=[], type=forward, metavar="HOST_PORT:GUEST_PORT",
        help="host 127.0.0.1:HOST_PORT reaches the guest's GUEST_PORT (TCP); gives the guest a NIC")
    add("command", nargs=argparse.REMAINDER, help="the command to run in the guest, after --")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        raise UsageError("no command given (usage: hack/vm-run [options] -- CMD...)")
    nodes, cpus, threads = args.numa_nodes, args.cpus, args.threads_per_core
    if min(nodes, cpus, threads) < 1:
        raise UsageError("--numa-nodes, --cpus and --threads-per-core must be positive")
    if cpus % (nodes * threads):
        raise UsageError(f"--cpus {cpus} is not a multiple of nodes x threads per core ({nodes * threads})")
    args.memory_bytes = parse_size(args.memory)
    mib = 2**20
    if args.memory_bytes % (nodes * mib) or args.memory_bytes // nodes < 256 * mib:
        raise UsageError(f"--memory {args.memory} does not split into {nodes} x (>= 256 MiB, whole MiB)")
    if not args.work.is_dir():
        raise UsageError(f"--work {args.work} is not a directory")
    args.work = args.work.resolve()
    if args.timeout <= 0 or args.boot_timeout <= 0:
        raise UsageError("--timeout and --boot-timeout must be positive")
    return args


def choose_accel(wanted: str) -> str:
    if wanted != "auto":
        return wanted
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        reason = "no usable /dev/kvm"
    elif Path("/sys/module/kvm_pvm").exists():
        reason = "/dev/kvm is kvm_pvm, which runs only PVM-guest kernels"
    elif not re.search(r"^flags\s*:.*\b(vmx|svm)\b", Path("/proc/cpuinfo").read_text(), re.MULTILINE):
        reason = "no vmx/svm in /proc/cpuinfo"
    else:
        return "kvm"
    log(f"accel=tcg ({reason}; expect about 8 s before the command starts)")
    return "tcg"


def ensure_debs(packages: tuple[str, ...]) -> None:
    """Have hack/setup install its Debian packages when any of `packages` is missing."""
    missing = [
        pkg for pkg in packages
        if "install ok installed" not in subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True
        ).stdout
    ]
    if missing:
        log(f"{' '.join(missing)} missing: running hack/setup --debs-only")
        setup = CHECKOUT / "hack" / "setup"
        subprocess.run([str(setup), "--debs-only"], check=True, stdout=sys.stderr, timeout=1800)


def kernel_package() -> str:
    """The versioned package behind Debian's `linux-image-amd64`, refreshing apt's lists once if needed."""
    for attempt in range(2):
        out = subprocess.run(
            ["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True, timeout=60
        ).stdout
        if match := re.search(r"Depends: (linux-image-\d\S*-amd64)", out):
            return match.group(1)
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-q"], check=True, timeout=600, stdout=sys.stderr)
    raise UsageError("apt cannot resolve linux-image-amd64 to a kernel package (no Debian mirror reachable?)")


def ensure_kernel() -> Path:
    """The unpacked kernel tree: `.cache/vm/<package>/{boot,lib/modules}`, fetched once."""
    current = CACHE / "current"
    wanted = " ".join(MODULE_DIRS)  # a tree unpacked for other module directories is unpacked again
    if (current / ".done").exists() and (current / ".done").read_text() == wanted:
        return current.resolve()
    package = kernel_package()
    root = CACHE / package
    done = root / ".done"
    if not done.exists() or done.read_text() != wanted:
        log(f"fetching {package} (about 70 MB, once) into {root}")
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="vm-run-deb-") as download:
            subprocess.run(
                ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", package],
                cwd=download, check=True, timeout=900, stdout=sys.stderr,
            )
            (deb,) = Path(download).glob("*.deb")
            members = ["./boot/vmlinuz-*", "./lib/modules/*/modules.builtin"]
            members += [f"./lib/modules/*/kernel/{d}/*" for d in MODULE_DIRS]
            tar_x = ["tar", "-x", "-C", str(root), "--wildcards", *members]
            unpack = ["dpkg-deb", "--fsys-tarfile", str(deb)]
            with subprocess.Popen(unpack, stdout=subprocess.PIPE) as deb_tar:
                subprocess.run(tar_x, stdin=deb_tar.stdout, check=True, timeout=600)
            if deb_tar.returncode:
                raise UsageError(f"dpkg-deb could not read {deb.name}")
        done.write_text(wanted)
    current.unlink(missing_ok=True)
    current.symlink_to(package)
    return root


def ensure_vmlinux(kernel: Path) -> Path:
    """The uncompressed ELF kernel, booted through its PVH entry.

    Decompressing the bzImage's xz payload once on the host saves 4-5 s of in-guest decompression per boot
    under TCG. Falls back to the bzImage when its payload is not xz.
    """
    (bzimage,) = kernel.glob("boot/vmlinuz-*")
    vmlinux = kernel / "vmlinux"
    if vmlinux.exists():
        return vmlinux
    data = bzimage.read_bytes()
    start = data.find(b"\xfd7zXZ\x00")
    if start < 0:
        return bzimage
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
    if elf[:4] != b"\x7fELF":
        return bzimage
    partial = vmlinux.with_suffix(".part")
    partial.write_bytes(elf)
    partial.rename(vmlinux)
    return vmlinux


def module_load_order(kernel: Path) -> list[Path]:
    """GUEST_MODULES and their dependencies, each after what it depends on."""
    (tree,) = kernel.glob("lib/modules/*")
    builtin = {module_name(Path(line)) for line in (tree / "modules.builtin").read_text().split()}
    files = {module_name(p): p for p in tree.glob("kernel/**/*.ko*")}
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name in builtin:
            return
        seen.add(name)
        if name not in files:
            raise UsageError(f"kernel module {name} is neither built in nor in {tree}/kernel/{MODULE_DIRS}")
        for dep in module_depends(files[name]):
            visit(dep)
        order.append(files[name])

    for name in GUEST_MODULES:
        visit(name)
    return order


def module_name(path: Path) -> str:
    return path.name.split(".")[0].replace("-", "_")


def read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".zst":
        return subprocess.run(["zstd", "-qdc", str(path)], capture_output=True, check=True).stdout
    return data


def module_depends(path: Path) -> list[str]:
    match = re.search(rb"(?:^|\x00)depends=([^\x00]*)\x00", read_module(path))
    return [d.decode().replace("-", "_") for d in match.group(1).split(b",") if d] if match else []


def cpio_newc(entries: list[tuple[str, int, bytes, int]]) -> bytes:
    """An initramfs archive: (name, mode, content, rdev major*256+minor) in the kernel's `newc` format."""
    out = bytearray()

    def add(name: str, mode: int, content: bytes, rdev: int, ino: int) -> None:
        encoded = name.encode() + b"\x00"
        fields = (ino, mode, 0, 0, 1, 0, len(content), 0, 0, rdev >> 8, rdev & 0xFF, len(encoded), 0)
        out.extend(b"070701" + b"".join(b"%08x" % f for f in fields) + encoded)
        out.extend(b"\x00" * (-len(out) % 4) + content)
        out.extend(b"\x00" * (-len(out) % 4))

    for ino, (name, mode, content, rdev) in enumerate(entries, start=1):
        add(name, mode, content, rdev, ino)
    add("TRAILER!!!", 0, b"", 0, 0)
    return bytes(out)


def ensure_initramfs(kernel: Path) -> Path:
    """busybox-static, the guest modules and hack/vm-init as /init; rebuilt when any of them changes."""
    modules = module_load_order(kernel)
    busybox = Path("/bin/busybox").read_bytes()
    init = GUEST_INIT.read_bytes()
    key = hashlib.sha256(busybox + init + "\n".join(map(str, modules)).encode()).hexdigest()[:16]
    initrd = CACHE / f"initrd-{kernel.name}-{key}.cpio.gz"
    if initrd.exists():
        return initrd
    directory, executable, char_device = 0o040755, 0o100755, 0o020600
    entries = [(d, directory, b"", 0) for d in ("bin", "dev", "proc", "sys", "modules", "tmp")]
    entries += [("dev/console", char_device, b"", 5 * 256 + 1), ("bin/busybox", executable, busybox, 0)]
    entries += [("init", executable, init, 0)]
    entries += [
        (f"modules/{i:02d}-{module_name(m)}.ko", 0o100644, read_module(m), 0)
        for i, m in enumerate(modules)
    ]
    for stale in CACHE.glob(f"initrd-{kernel.name}-*.cpio.gz"):
        stale.unlink()
    partial = initrd.with_suffix(".part")
    partial.write_bytes(gzip.compress(cpio_newc(entries), compresslevel=1))
    partial.rename(initrd)
    return initrd


def qemu_command(args: argparse.Namespace, accel: str, vmlinux: Path, initrd: Path, ctl: Path) -> list[str]:
    nodes, cpus, threads = args.numa_nodes, args.cpus, args.threads_per_core
    per_node_mib = args.memory_bytes // nodes // 2**20
    cmd = ["qemu-system-x86_64", "-machine", "q35", "-m", f"{per_node_mib * nodes}M"]
    if accel == "kvm":
        cmd += ["-accel", "kvm", "-cpu", "host"]
    else:
        cmd += ["-accel", "tcg,thread=multi", "-cpu", "max,vendor=GenuineIntel"]
    cmd += ["-smp", f"{cpus},sockets={nodes},cores={cpus // (nodes * threads)},threads={threads}"]
    for node in range(nodes):
        cmd += ["-object", f"memory-backend-ram,id=mem{node},size={per_node_mib}M"]
        cmd += ["-numa", f"node,nodeid={node},memdev=mem{node}"]
        cmd += ["-numa", f"cpu,node-id={node},socket-id={node}"]
    for a in range(nodes):
        cmd += [arg for b in range(nodes) if a != b for arg in ("-numa", f"dist,src={a},dst={b},val=20")]
    cmd += ["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]
    # ttyS0 carries the command's output to stdout; ttyS1, the kernel console, goes to a file shown on stderr
    cmd += ["-chardev", "stdio,id=output,signal=off", "-serial", "chardev:output"]
    cmd += ["-serial", f"file:{ctl / 'kernel.log'}"]
    cmd += ["-kernel", str(vmlinux), "-initrd", str(initrd), "-append", KERNEL_ARGS]
    if args.forward:
        forwards = "".join(f",hostfwd=tcp:127.0.0.1:{host}-:{guest}" for host, guest in args.forward)
        cmd += ["-netdev", f"user,id=net0,restrict=on,net=10.0.2.0/24{forwards}",
                "-device", "virtio-net-pci,netdev=net0"]
    shares = [("hostroot", Path("/"), ",readonly=on"), ("ctl", ctl, ""), ("work", args.work, "")]
    for tag, path, extra in shares:
        cmd += ["-fsdev", f"local,id={tag},path={path},security_model=none,multidevs=remap{extra}"]
        cmd += ["-device", f"virtio-9p-pci,fsdev={tag},mount_tag={tag}"]
    return cmd


def write_ctl(ctl: Path, args: argparse.Namespace) -> None:
    env = {
        "PATH": f"{os.environ.get('PATH', '')}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": os.environ.get("TERM", "dumb"),
        "COLUMNS": str(shutil.get_terminal_size().columns),
        "VM_NUMA_NODES": str(args.numa_nodes),
        "VM_CPUS": str(args.cpus),
        "VM_THREADS_PER_CORE": str(args.threads_per_core),
        "VM_MEMORY": str(args.memory_bytes),
    }
    if not sys.stdout.isatty():
        env |= {"NO_COLOR": "1", "PY_COLORS": "0"}  # the guest's console is a tty even when stdout is not
    (ctl / "env").write_text(f"WORKDIR={shlex.quote(str(args.work))}\n")
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    cd = f"cd {shlex.quote(os.getcwd())} || exit 125\n"
    (ctl / "cmd").write_text(exports + cd + "exec " + shlex.join(args.command) + "\n")


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP raise Interrupted, so the finally blocks that stop QEMU run."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Wait up to `grace` seconds for QEMU to exit by itself, then terminate it, then kill it."""
    for action in (None, proc.terminate, proc.kill):
        if action is not None:
            log(f"stopping QEMU (pid {proc.pid}) with {action.__name__}")
            action()
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            grace = STOP_GRACE_S


def wedged(kernel_log: Path) -> int | None:
    """How long a CPU of the guest has been stuck, when its kernel says one has been for WEDGED_S or more."""
    try:
        text = kernel_log.read_text(errors="replace")
    except OSError:
        return None
    stuck = max((int(seconds) for seconds in _SOFT_LOCKUP.findall(text)), default=0)
    return stuck if stuck >= WEDGED_S else None


def stream(fd: int, started: float, deadline: float, boot_deadline: float,
           kernel_log: Path | None = None) -> tuple[float | None, bool]:
    """Copy the console to stdout until QEMU closes it, the deadline passes, the guest is not ready by
    `boot_deadline`, or (with `kernel_log`) its kernel reports it wedged.

    Returns the boot time (None if the guest never got ready or wedged) and whether QEMU closed the console
    in time.
    Console lines before the guest's ready line (kernel warnings, init messages) are copied line by line
    without "\r"; after it, bytes pass through as they come, so progress output shows at once.
    """
    out = sys.stdout.buffer
    boot: float | None = None
    pending = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            remaining = (deadline if boot is not None else min(deadline, boot_deadline)) - time.monotonic()
            if remaining <= 0:
                return boot, False
            if not sel.select(min(remaining, WEDGE_CHECK_S)):
                if kernel_log is not None and (stuck := wedged(kernel_log)) is not None:
                    log(f"the guest wedged: a CPU stuck for {stuck} s (guest kernel: soft lockup)")
                    return None, False
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                out.write(pending)
                out.flush()
                return boot, True
            if boot is not None:
                out.write(chunk)
                out.flush()
                continue
            pending += chunk
            while boot is None and b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if line.startswith(READY):
                    boot = time.monotonic() - started
                    log(f"guest booted in {boot:.1f} s (guest uptime {line[len(READY):].decode()} s)")
                else:
                    out.write(line + b"\n")
            if boot is not None:
                out.write(pending)
                pending = b""
            out.flush()


def show_kernel_log(path: Path) -> None:
    """The guest kernel's console (critical messages only, `loglevel=3`) on stderr, bar the power-off line."""
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if line.strip() and not line.endswith("reboot: Power down"):
                log(f"guest kernel: {line}")


def run(args: argparse.Namespace) -> int:
    ensure_debs(("qemu-system-x86", "busybox-static"))
    accel = choose_accel(args.accel)
    if args.accel != "auto" or accel == "kvm":
        log(f"accel={accel}")
    kernel = ensure_kernel()
    vmlinux, initrd = ensure_vmlinux(kernel), ensure_initramfs(kernel)
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        rc = boot_and_run(args, accel, vmlinux, initrd)
        if rc is not None:
            return rc
        log(f"the guest was not ready within {args.boot_timeout:.0f} s, or wedged (boot {attempt} of "
            f"{BOOT_ATTEMPTS})")
    log("giving up: the guest never got ready")
    return EXIT_GUEST_FAILED


def boot_and_run(args: argparse.Namespace, accel: str, vmlinux: Path, initrd: Path) -> int | None:
    """One guest boot; the command's exit status, or None when the guest never got ready (boot again)."""
    with tempfile.TemporaryDirectory(prefix="vm-run-ctl-") as tmp:
        ctl = Path(tmp)
        write_ctl(ctl, args)
        cmd = qemu_command(args, accel, vmlinux, initrd, ctl)
        started = time.monotonic()
        boot_deadline = started + args.boot_timeout
        with subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True
        ) as proc:
            assert proc.stdout is not None
            finished = False
            try:
                boot, finished = stream(proc.stdout.fileno(), started, started + args.timeout, boot_deadline,
                                        ctl / "kernel.log")
            finally:
                stop(proc, STOP_GRACE_S if finished else 0)
        show_kernel_log(ctl / "kernel.log")
        total = time.monotonic() - started
        # QEMU is by far the largest child this process has waited for (apt, tar, dpkg-deb are small)
        rss = f"QEMU peak RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024} MiB"
        if not finished and boot is None:
            return None
        if not finished:
            log(f"timeout: the guest did not finish within {args.timeout:.0f} s (--timeout); {rss}")
            return EXIT_TIMEOUT
        if (ctl / "error").exists():
            log(f"guest setup failed: {(ctl / 'error').read_text().strip()}")
            return EXIT_GUEST_FAILED
        if boot is None or not (ctl / "rc").exists():
            log(f"the guest reported no exit status (QEMU exit status {proc.returncode}); {rss}")
            return EXIT_GUEST_FAILED
        rc = int((ctl / "rc").read_text())
        log(f"exit status {rc}; boot {boot:.1f} s, total {total:.1f} s, {rss}")
        return rc


def main() -> int:
    try:
        args = parse_args(sys.argv[1:])
        with signals_raise():
            return run(args)
    except UsageError as err:
        log(str(err))
        return EXIT_USAGE
    except subprocess.CalledProcessError as err:
        log(f"{shlex.join(map(str, err.cmd))} failed with exit status {err.returncode}")
        return EXIT_GUEST_FAILED
    except Interrupted as err:
        log(f"interrupted by {err}")
        return 128 + err.signum


if __name__ == "__main__":
    sys.exit(main())
