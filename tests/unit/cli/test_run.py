"""`nri-podlevel run` settings: defaults < config file < environment < command line, and bad configuration."""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from podlevel.build import version
from podlevel.cli.main import main
from podlevel.cli.run import resolve, restrict_umask
from podlevel.engine.errors import InputError


def test_precedence_command_line_then_environment_then_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "policy: restricted\nscope: container\nplugin-index: '30'\nreserved-cpus: 0-1\nlog-level: debug\n"
        "nri-socket: /file.sock\n"
    )
    env = {"NRI_PODLEVEL_SCOPE": "pod", "NRI_PODLEVEL_PLUGIN_INDEX": "20"}
    argv = ["--config", str(config), "--plugin-index", "40", "--nri-socket", "/var/run/nri/nri.sock"]
    args = resolve(argv, env)
    assert args.plugin_index == "40"  # the command line wins
    assert args.nri_socket == "/var/run/nri/nri.sock", "a flag given with the default value still wins"
    assert args.scope == "pod"  # then the environment
    assert args.policy == "restricted"  # then the file
    assert args.reserved_cpus == "0-1"
    assert args.log_level == "debug"
    assert args.plugin_name == "podlevel"  # then the default


def test_config_file_named_by_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy: best-effort\n")
    assert resolve([], {"NRI_PODLEVEL_CONFIG": str(config)}).policy == "best-effort"


def test_repeatable_reserved_memory_from_every_source(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("reserved-memory: ['0:memory=1Gi', '1:memory=512Mi']\n")
    assert resolve(["--config", str(config)], {}).reserved_memory == ["0:memory=1Gi", "1:memory=512Mi"]
    env = {"NRI_PODLEVEL_RESERVED_MEMORY": "0:memory=2Gi;1:memory=1Gi,hugepages-2Mi=0"}
    assert resolve([], env).reserved_memory == ["0:memory=2Gi", "1:memory=1Gi,hugepages-2Mi=0"]
    both = resolve(["--reserved-memory", "0:memory=300Mi"], env)
    assert both.reserved_memory == ["0:memory=300Mi"], "the command line replaces, not extends"


@pytest.mark.parametrize(
    ("source", "value", "origin"),
    [
        ("env", "Pod", "environment NRI_PODLEVEL_SCOPE"),
        ("file", "Pod", "config file"),
    ],
    ids=["environment", "file"],
)
def test_bad_values_are_checked_like_flags_and_name_their_source(
    tmp_path: Path, source: str, value: str, origin: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"scope: {value}\n" if source == "file" else "{}\n")
    env = {"NRI_PODLEVEL_SCOPE": value} if source == "env" else {}
    with pytest.raises(InputError) as err:
        resolve(["--config", str(config)], env)
    assert "--scope" in err.value.message and "invalid choice: 'Pod'" in err.value.message
    assert origin in err.value.message


def test_policy_names_are_case_checked() -> None:
    with pytest.raises(InputError, match="invalid choice: 'Static'"):
        resolve([], {"NRI_PODLEVEL_CPU_POLICY": "Static"})


@pytest.mark.parametrize(
    ("text", "rule"),
    [("bogus-key: 1\n", "unknown setting 'bogus-key'"), ("- a\n- b\n", "must hold a mapping"),
     ("policy: [\n", "cannot read")],
    ids=["unknown-key", "not-a-mapping", "not-yaml"],
)
def test_bad_config_file_names_the_problem(tmp_path: Path, text: str, rule: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with pytest.raises(InputError, match=rule):
        resolve(["--config", str(config)], {})


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--reserved-cpus", "1-0"], {}, "not ascending"),
        (["--plugin-index", "7"], {}, "two digits"),
        (["--sysfs-root", "/nonexistent-sysfs"], {}, "/nonexistent-sysfs"),
        (["--cpu-options", "no-such-option=true"], {}, "no-such-option"),
        ([], {"NRI_PODLEVEL_POLICY": "sometimes"}, "NRI_PODLEVEL_POLICY"),
        ([], {"NRI_PODLEVEL_RESERVED_MEMORY": "9:memory=1Gi"}, "NUMA node id"),
    ],
    ids=["reserved-cpus", "plugin-index", "sysfs-root", "cpu-option", "env-policy", "env-reserved-memory"],
)
def test_bad_configuration_exits_2_before_connecting(
    argv: list[str], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    socket = str(tmp_path / "absent.sock")
    result = subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", socket, *argv],
        capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin", **env},
    )
    assert result.returncode == 2, result.stderr
    assert "bad configuration" in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_config_scalars_stay_as_written(tmp_path: Path) -> None:
    """YAML would read `05` as 5 and `010` as the octal 8; settings are strings as written."""
    config = tmp_path / "config.yaml"
    config.write_text("plugin-index: 05\nreserved-cpus: 010\nplugin-name:\n")
    args = resolve(["--config", str(config)], {})
    assert (args.plugin_index, args.reserved_cpus) == ("05", "010")
    assert args.plugin_name == "podlevel", "an empty value leaves the setting alone"


def test_a_list_for_a_single_valued_setting_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy: [restricted, none]\n")
    with pytest.raises(InputError, match="policy takes one value, not a list"):
        resolve(["--config", str(config)], {})


def test_values_that_start_with_a_dash_stay_values(tmp_path: Path) -> None:
    args = resolve([], {"NRI_PODLEVEL_PLUGIN_NAME": "-x", "NRI_PODLEVEL_NRI_SOCKET": "-/run/nri.sock"})
    assert (args.plugin_name, args.nri_socket) == ("-x", "-/run/nri.sock")
    assert args.sources["--plugin-name"] == "environment NRI_PODLEVEL_PLUGIN_NAME"


def test_later_errors_name_where_the_value_came_from(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", str(tmp_path / "absent.sock")],
        capture_output=True, text=True, timeout=30, check=False,
        env={"PATH": "/usr/bin:/bin", "NRI_PODLEVEL_RESERVED_CPUS": "1-0"},
    )
    assert result.returncode == 2
    assert "--reserved-cpus" in result.stderr and "not ascending" in result.stderr
    assert "environment NRI_PODLEVEL_RESERVED_CPUS" in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--podresources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock"],
         "--podresources-socket: /var/lib/kubelet/pod-resources/kubelet.sock is the kubelet's own"),
        (["--podresources-socket", "{tmp}/config.yaml"],
         "--podresources-socket: {tmp}/config.yaml exists and is not a socket; refusing to replace it"),
        (["--podresources-socket-group", "no-such-group-here"],
         "--podresources-socket-group: no group named 'no-such-group-here'"),
    ],
    ids=["kubelet-socket", "not-a-socket", "unknown-group"],
)
def test_bad_podresources_socket_exits_2(tmp_path: Path, flags: list[str], message: str) -> None:
    (tmp_path / "config.yaml").write_text("{}\n")
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in flags]
    result = subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", str(tmp_path / "absent.sock"),
         "--state-dir", str(tmp_path / "state"), "--metrics-address", "", "--debug-address", "",
         "--podresources-socket", str(tmp_path / "pr.sock"), *argv],
        capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2, result.stderr
    assert f"bad configuration: {message.replace('{tmp}', str(tmp_path))}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "pr.sock").exists()


@pytest.mark.parametrize(
    ("podresources", "message"),
    [("{tmp}/pr.sock", "--debug-address: cannot listen on 127.0.0.1:{port}: Address already in use"),
     ("/var/lib/kubelet/pod-resources/kubelet.sock", "--podresources-socket: /var/lib/kubelet/")],
    ids=["port-taken-after-the-socket", "bad-socket-before-any-port"],
)
def test_start_up_checks_the_socket_before_binding_ports_and_undoes_what_it_made(
        tmp_path: Path, podresources: str, message: str) -> None:
    """The PodResources socket is made before any port is bound (a bad one is the error, not a port some
    other process holds), and a port that cannot be bound undoes the socket: exit 2, nothing left behind."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", str(tmp_path / "absent.sock"),
             "--state-dir", str(tmp_path / "state"), "--metrics-address", "127.0.0.1:0",
             "--debug-address", f"127.0.0.1:{port}",
             "--podresources-socket", podresources.replace("{tmp}", str(tmp_path))],
            capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"},
        )
    assert result.returncode == 2, result.stderr
    expected = message.replace("{port}", str(port))
    assert f"bad configuration: {expected}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


@pytest.mark.parametrize(("inherited", "kept"), [(0o000, 0o022), (0o002, 0o022), (0o077, 0o077)])
def test_the_agent_never_creates_what_group_or_others_may_write(inherited: int, kept: int) -> None:
    before = os.umask(inherited)
    try:
        restrict_umask()
        assert os.umask(before) == kept
    finally:
        os.umask(before)


def test_sigterm_stops_the_agent_with_every_line_written(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", str(tmp_path / "absent.sock"),
        "--state-dir", str(tmp_path / "state"), "--metrics-address", "", "--debug-address", "",
        "--podresources-socket", "", "--cgroup-root", "", "--log-format", "json",
    ]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"}) as agent:
        assert agent.stderr is not None
        lines = []
        for line in agent.stderr:
            lines.append(json.loads(line)["event"])
            if "reconnecting in" in line:
                break
        agent.send_signal(signal.SIGTERM)
        lines += [json.loads(line)["event"] for line in agent.stderr]
        assert agent.wait(timeout=30) == 0
    assert any(line.startswith("node ") for line in lines)
    assert any("cannot connect to the runtime" in line for line in lines)


def test_version_names_the_build(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    python = platform.python_version()
    assert capsys.readouterr().out == f"nri-podlevel {version()} (Python {python}, NRI API v1alpha1)\n"
    assert version() != "unknown", "the test environment installs the distribution"
