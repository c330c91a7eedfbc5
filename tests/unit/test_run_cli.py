"""`nri-podlevel run` settings: flags, environment and config file, and bad configuration."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from podlevel.cli.main import build_parser
from podlevel.cli.run import apply_config_file
from podlevel.engine.errors import InputError

DAEMONSET = Path(__file__).parents[2] / "deploy" / "daemonset.yaml"


def _parse(argv: list[str], environ: dict[str, str] | None = None,
           monkeypatch: pytest.MonkeyPatch | None = None) -> argparse.Namespace:
    if monkeypatch is not None:
        for key, value in (environ or {}).items():
            monkeypatch.setenv(key, value)
    args = build_parser().parse_args(["run", *argv])
    apply_config_file(args, args.defaults, environ or {})
    return args


def test_daemonset_args_are_run_settings() -> None:
    container = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.handler.__module__ == "podlevel.cli.run"
    assert args.sysfs_root == "/host/sys"


def test_precedence_flag_then_environment_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy: restricted\nscope: container\nplugin-index: '30'\nreserved-cpus: 0-1\n")
    env = {"NRI_PODLEVEL_SCOPE": "pod", "NRI_PODLEVEL_PLUGIN_INDEX": "20"}
    args = _parse(["--config", str(config), "--plugin-index", "40"], env, monkeypatch)
    assert args.plugin_index == "40"  # the command line wins
    assert args.scope == "pod"  # then the environment
    assert args.policy == "restricted"  # then the file
    assert args.reserved_cpus == "0-1"
    assert args.nri_socket == "/var/run/nri/nri.sock"  # then the default


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
        _parse(["--config", str(config)])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reserved-cpus", "1-0"], "not ascending"),
        (["--plugin-index", "7"], "two digits"),
        (["--sysfs-root", "/nonexistent-sysfs"], "/nonexistent-sysfs"),
        (["--cpu-options", "no-such-option=true"], "no-such-option"),
    ],
    ids=["reserved-cpus", "plugin-index", "sysfs-root", "cpu-option"],
)
def test_bad_configuration_exits_2_before_connecting(argv: list[str], message: str, tmp_path: Path) -> None:
    socket = str(tmp_path / "absent.sock")
    result = subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", socket, *argv],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "bad configuration" in result.stderr
    assert message in result.stderr
