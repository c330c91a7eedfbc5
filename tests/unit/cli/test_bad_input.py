"""Every command on hostile input: exit status 2 (1 where a command documents it for a corrupt checkpoint)
and one short line naming the input and the rule, never a traceback, a read without end or a MemoryError."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from support.builders import EXAMPLES, SMALL

POD = str(EXAMPLES / "pod-scope-mixed.yaml")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    def limit_memory() -> None:  # formatting a 4-billion-CPU set once took more than this
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", *args], capture_output=True, text=True, timeout=60,
        check=False, env={"PATH": "/usr/bin:/bin", **(env or {})}, stdin=subprocess.DEVNULL,
        preexec_fn=limit_memory,
    )


def one_line(done: subprocess.CompletedProcess[str], status: int, *fragments: str) -> None:
    assert done.returncode == status, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("{")]  # the plugin's log
    assert len(lines) == 1 and len(lines[0]) < 600, done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    paths = {
        "non-utf8": ("kind: Pod\nmetadata: {name: \xff}\n".encode("latin-1"), "UTF-8"),
        "nan": (b"kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n"
                b"    resources: {limits: {cpu: .nan, memory: 1Gi}}\n", "quantity"),
        "deep": (b"[" * 5000 + b"]" * 5000, "nested more than 64 levels"),
    }
    found = {}
    for name, (data, _) in paths.items():
        (tmp_path / f"{name}.yaml").write_bytes(data)
        found[name] = str(tmp_path / f"{name}.yaml")
    found["zero"] = "/dev/zero"
    return found


RULES = {"non-utf8": "UTF-8", "nan": "not a finite number", "deep": "nested more than 64 levels",
         "zero": "more than 16777216 bytes"}


@pytest.mark.parametrize("case", sorted(RULES))
@pytest.mark.parametrize("command", ["simulate", "annotate"])
def test_pod_commands_on_bad_files(files: dict[str, str], case: str, command: str) -> None:
    args = ["--topology", SMALL] if command == "simulate" else []
    one_line(run(command, *args, files[case]), 2, RULES[case], Path(files[case]).name)


@pytest.mark.parametrize("case", ["non-utf8", "deep", "zero"])
def test_run_on_a_bad_config_file(files: dict[str, str], case: str, tmp_path: Path) -> None:
    done = run("run", "--config", files[case], "--nri-socket", str(tmp_path / "absent.sock"))
    one_line(done, 2, "--config", RULES[case])


def test_run_on_a_nan_setting(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("reserved-memory: '0:memory=.nan'\n")
    config, socket = str(tmp_path / "config.yaml"), str(tmp_path / "absent.sock")
    done = run("run", "--config", config, "--nri-socket", socket)
    one_line(done, 2, "--reserved-memory", "not a Kubernetes quantity")


@pytest.mark.parametrize(("fd", "reason"), [("99", "Bad file descriptor"), ("0", "not a socket"),
                                            ("9" * 30, "not a descriptor number")])
def test_run_launched_with_a_bad_socket_fd_exits_2(tmp_path: Path, fd: str, reason: str) -> None:
    env = {"NRI_PLUGIN_SOCKET": fd, "NRI_PLUGIN_NAME": "podlevel", "NRI_PLUGIN_IDX": "10"}
    done = run("run", "--state-dir", str(tmp_path / "state"), "--metrics-address", "",
               "--podresources-socket", "", "--cgroup-root", "", env=env)
    one_line(done, 2, "NRI_PLUGIN_SOCKET", reason)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [(["--topology", "sockets=1,nodes-per-socket=1,cores-per-node=100000000000,threads-per-core=1"],
      "at most 8192 CPUs"),
     (["--topology", "sockets=1000,nodes-per-socket=1000,cores-per-node=1000,threads-per-core=2"],
      "at most 1024 nodes and 8192 CPUs"),
     (["--topology", SMALL, "--reserved-cpus", "0-4000000000"], "CPU ids are below 8192")],
    ids=["cores-per-node", "machine", "reserved-cpus"],
)
def test_simulate_on_machines_no_linux_numbers(flags: list[str], fragment: str) -> None:
    one_line(run("simulate", *flags, POD), 2, fragment)


def test_run_on_reserved_cpus_beyond_any_machine(tmp_path: Path) -> None:
    done = run("run", "--reserved-cpus", "0-4000000000", "--nri-socket", str(tmp_path / "absent.sock"))
    one_line(done, 2, "--reserved-cpus", "CPU ids are below 8192")


@pytest.mark.parametrize("subcommand", ["inspect", "verify"])
@pytest.mark.parametrize(
    ("content", "status", "fragment"),
    [(b"{\"a\":" * 5000 + b"1" + b"}" * 5000, 1, "nested 5000 levels deep"),
     (b"{\"a\": 1" + b"0" * 5000 + b"}", 1, "an integer of 5001 digits"),
     (b"\xff\xfe\x00", 1, "not JSON"),
     (None, 2, "more than 16777216 bytes")],
    ids=["deep", "long-integer", "binary", "zero"],
)
def test_checkpoint_on_bad_files(
    tmp_path: Path, subcommand: str, content: bytes | None, status: int, fragment: str
) -> None:
    path = "/dev/zero"
    if content is not None:
        path = str(tmp_path / "cpu_manager_state")
        Path(path).write_bytes(content)
    one_line(run("checkpoint", subcommand, path), status, fragment)


@pytest.mark.parametrize("command", ["show", "check"])
def test_operator_commands_on_a_hostile_state_dir(tmp_path: Path, command: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "cpu_manager_state").write_bytes(b"[" * 5000 + b"]" * 5000)
    done = run(command, "--state-dir", str(state), "--address", "127.0.0.1:1", "--cgroup-root", str(tmp_path))
    one_line(done, 2, "cpu_manager_state", "nested 5000 levels deep")


@pytest.mark.parametrize(
    ("pod", "rule"),
    [("default/" + "n" * 100_000, "DNS-1123 subdomain"), (os.fsdecode(b"default/\xff"), "DNS-1123 subdomain"),
     ("Default/web", "DNS-1123 label"), ("web", "is not NAMESPACE/NAME")],
    ids=["long", "non-utf8", "namespace", "no-slash"],
)
def test_explain_on_a_hostile_pod_name(pod: str, rule: str) -> None:
    one_line(run("explain", pod, "--address", "127.0.0.1:1"), 2, rule)
