"""hack/vm-run (testbed.vm) without booting anything: argument rules, the QEMU command line it builds for a
guest shape, its initramfs archive format and how it copies the guest console. `make vm` boots the guest
itself."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import CHECKOUT, vm

VM_RUN = CHECKOUT / "hack/vm-run"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--"], "no command given"),
        (["--cpus", "6", "--", "true"], "--cpus 6 is not a multiple of nodes x threads per core (4)"),
        (["--numa-nodes", "0", "--", "true"], "must be positive"),
        (["--memory", "lots", "--", "true"], "'lots' is not a size"),
        (["--numa-nodes", "4", "--cpus", "8", "--memory", "512M", "--", "true"], "does not split into 4"),
        (["--work", "/nonexistent", "--", "true"], "/nonexistent is not a directory"),
        (["--timeout", "0", "--", "true"], "--timeout and --boot-timeout must be positive"),
        (["--boot-timeout", "-1", "--", "true"], "--timeout and --boot-timeout must be positive"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(vm.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        vm.parse_args(argv)


def test_bad_arguments_exit_2_before_anything_is_started() -> None:
    result = subprocess.run([str(VM_RUN), "--cpus", "3", "--", "true"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == "vm-run: --cpus 3 is not a multiple of nodes x threads per core (4)\n"


@pytest.mark.parametrize(
    ("text", "size"),
    [("4G", 4 << 30), ("4Gi", 4 << 30), ("512M", 512 << 20), ("1024MiB", 1 << 30), ("2048", 2048)],
)
def test_sizes(text: str, size: int) -> None:
    assert vm.parse_size(text) == size


def values(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == flag]


def test_qemu_command_for_four_nodes_with_smt(tmp_path: Path) -> None:
    shape = ["--numa-nodes", "4", "--cpus", "8", "--threads-per-core", "2", "--memory", "4G"]
    args = vm.parse_args([*shape, "--work", str(tmp_path), "--", "true"])
    cmd = vm.qemu_command(args, "tcg", Path("/k/vmlinux"), Path("/k/initrd"), tmp_path / "ctl")
    assert values(cmd, "-smp") == ["8,sockets=4,cores=1,threads=2"]
    assert values(cmd, "-cpu") == ["max,vendor=GenuineIntel"]
    assert values(cmd, "-m") == ["4096M"]
    assert values(cmd, "-object") == [f"memory-backend-ram,id=mem{node},size=1024M" for node in range(4)]
    numa = values(cmd, "-numa")
    for node in range(4):
        assert f"node,nodeid={node},memdev=mem{node}" in numa
        assert f"cpu,node-id={node},socket-id={node}" in numa
    assert sorted(v for v in numa if v.startswith("dist,")) == sorted(
        f"dist,src={a},dst={b},val=20" for a in range(4) for b in range(4) if a != b
    )
    assert "cgroup_no_v1=all" in values(cmd, "-append")[0].split()
    assert f"local,id=work,path={tmp_path},security_model=none,multidevs=remap" in values(cmd, "-fsdev")


def test_no_network_unless_a_port_is_forwarded(tmp_path: Path) -> None:
    plain = vm.qemu_command(vm.parse_args(["--work", str(tmp_path), "--", "true"]), "tcg",
                            Path("/k/vmlinux"), Path("/k/initrd"), tmp_path)
    assert values(plain, "-netdev") == []
    assert "virtio-net-pci,netdev=net0" not in values(plain, "-device")
    args = vm.parse_args(["--work", str(tmp_path), "--forward", "40001:6443", "--forward", "40002:22", "--",
                          "true"])
    cmd = vm.qemu_command(args, "tcg", Path("/k/vmlinux"), Path("/k/initrd"), tmp_path)
    assert values(cmd, "-netdev") == ["user,id=net0,restrict=on,net=10.0.2.0/24"
                                      ",hostfwd=tcp:127.0.0.1:40001-:6443,hostfwd=tcp:127.0.0.1:40002-:22"]
    assert "virtio-net-pci,netdev=net0" in values(cmd, "-device")


@pytest.mark.parametrize("text", ["6443", "a:b", "0:6443", "40000:70000"])
def test_a_bad_forward_is_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        vm.parse_args(["--forward", text, "--", "true"])
    assert "--forward" in capsys.readouterr().err


def test_kvm_uses_the_host_cpu(tmp_path: Path) -> None:
    args = vm.parse_args(["--work", str(tmp_path), "--", "true"])
    cmd = vm.qemu_command(args, "kvm", Path("/k/vmlinux"), Path("/k/initrd"), tmp_path)
    assert values(cmd, "-accel") == ["kvm"]
    assert values(cmd, "-cpu") == ["host"]


def test_initramfs_archive_lists_with_cpio() -> None:
    archive = vm.cpio_newc(
        [
            ("bin", 0o040755, b"", 0),
            ("bin/tool", 0o100755, b"#!/bin/sh\n", 0),
            ("dev/console", 0o020600, b"", 5 * 256 + 1),
        ]
    )
    listing = subprocess.run(["busybox", "cpio", "-tv"], input=archive, capture_output=True, check=True)
    entries = [(f[0], f[2], f[-1]) for f in map(str.split, listing.stdout.decode().splitlines())]
    assert entries == [
        ("drwxr-xr-x", "0", "bin"), ("-rwxr-xr-x", "10", "bin/tool"), ("crw-------", "0", "dev/console")
    ]


def test_console_lines_before_ready_lose_their_cr_and_the_ready_line_is_taken_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
    read_end, write_end = os.pipe()
    os.write(write_end, b"init: note\r\nvm-run: guest ready 2.5\r\nhello\r\nprogress...")
    os.close(write_end)
    now = time.monotonic()
    boot, finished = vm.stream(read_end, now, now + 60, now + 60)
    os.close(read_end)
    assert finished
    assert boot is not None
    assert out.getvalue() == b"init: note\nhello\r\nprogress..."


def test_a_silent_guest_times_out() -> None:
    read_end, write_end = os.pipe()
    try:
        now = time.monotonic()
        assert vm.stream(read_end, now, now, now + 60) == (None, False)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_guest_not_ready_by_the_boot_deadline_is_given_up_on_before_the_deadline() -> None:
    """A wedged boot (chatter, never the ready line) ends at the boot deadline, not the overall one."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"[   28.86] watchdog: BUG: soft lockup - CPU#1 stuck for 26s!\n")
        now = time.monotonic()
        assert vm.stream(read_end, now, now + 3600, now + 0.2) == (None, False)
        assert time.monotonic() - now < 60
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_guest_wedged_after_it_booted_is_given_up_on_when_its_kernel_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Booted, then silent with every CPU stuck (seen under load, TCG): the kernel's soft-lockup lines end
    the wait long before the command's timeout, so the guest is booted again; shorter stalls are waited
    out."""
    kernel_log = tmp_path / "kernel.log"
    kernel_log.write_text("[   57.07] watchdog: BUG: soft lockup - CPU#2 stuck for 26s! [kubelet:291]\n")
    assert vm.wedged(kernel_log) is None
    assert vm.wedged(tmp_path / "absent.log") is None
    stuck = "[  169.08] watchdog: BUG: soft lockup - CPU#2 stuck for 130s! [kubelet:291]\n"
    kernel_log.write_text(kernel_log.read_text() + stuck)
    assert vm.wedged(kernel_log) == 130
    monkeypatch.setattr(vm, "WEDGE_CHECK_S", 0.05)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO()))
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"vm-run: guest ready 4.8\n")
        now = time.monotonic()
        assert vm.stream(read_end, now, now + 3600, now + 60, kernel_log) == (None, False)
        assert time.monotonic() - now < 60
    finally:
        os.close(read_end)
        os.close(write_end)
