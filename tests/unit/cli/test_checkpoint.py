"""`nri-podlevel checkpoint inspect|verify|migrate`: output and exit status."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from podlevel.cli.main import main
from podlevel.state.formats import decode

FIXTURES = Path(__file__).parents[1] / "state" / "checkpoints"
POD = "6f1f3a52-3c55-4f0e-9d1b-0a8c2e7f4b11"


def _copy(tmp_path: Path, fixture: str) -> Path:
    return Path(shutil.copy(FIXTURES / fixture, tmp_path / fixture))


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_verify_accepts_every_kubelet_fixture(fixture: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "verify", str(FIXTURES / fixture)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(": valid")


def test_verify_names_the_failing_part_and_the_downgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _copy(tmp_path, "cpu-v4-kubelet-1.37.json")
    obj = json.loads(path.read_text())
    path.write_text(json.dumps({**obj, "checksum": 1}))
    assert main(["checkpoint", "verify", str(path)]) == 1
    captured = capsys.readouterr()
    assert "FAIL  legacy part" in captured.out
    assert "INVALID: legacy part" in captured.err and "downgrade to 1.36" in captured.err


def test_verify_and_inspect_a_corrupt_or_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cpu_manager_state"
    path.write_text('{"policyName":"static","defaultCpuSet":"0-3","checksum":7}')
    for action in ("verify", "inspect", "migrate"):
        assert main(["checkpoint", action, str(path)]) == 1
        assert "corrupt: bad checksum: as V2" in capsys.readouterr().err
    assert main(["checkpoint", "verify", str(tmp_path / "absent")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_inspect_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", str(FIXTURES / "cpu-v4-kubelet-1.37.json")]) == 0
    out = capsys.readouterr().out
    assert "CPU manager checkpoint V4 (kubelet 1.37), policy 'static'" in out
    assert "default set: 0-1,8-15" in out
    assert f"pod {POD}: bubble 2-5\n  app: 2-3\n  sidecar: 4-5" in out
    assert "no bubble\n  main: 6-7" in out


def test_inspect_memory_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", "--json", str(FIXTURES / "memory-v3-kubelet-1.37.json")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["kind"], summary["version"], summary["valid"]) == ("memory", 3, True)
    assert summary["machineState"]["0"]["memoryMap"]["memory"]["reserved"] == 2 << 30
    assert summary["pods"][POD]["bubble"] == [{"numaAffinity": [0], "type": "memory", "size": 2 << 30}]
    assert summary["pods"][POD]["containers"]["app"][0]["size"] == 1 << 30


def test_inspect_memory_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", str(FIXTURES / "memory-v2-kubelet-1.36.json")]) == 0
    out = capsys.readouterr().out
    assert "NUMA node 0: 1 assignments, cells 0" in out
    assert "memory: total 16Gi, system reserved 1Gi, allocatable 15Gi, reserved 2Gi, free 13Gi" in out
    assert f"pod {POD}: bubble memory 2Gi on node 0" in out


def test_migrate_to_newest_and_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path, "cpu-v2-kubelet-1.35.json")
    original = decode(path.read_bytes()).content
    assert main(["checkpoint", "migrate", str(path)]) == 0
    assert "V2 -> V4" in capsys.readouterr().out
    assert decode(path.read_bytes()).version == 4 and decode(path.read_bytes()).content == original
    assert main(["checkpoint", "migrate", str(path), "--to", "V2"]) == 0
    assert decode(path.read_bytes()).version == 2
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_migrate_refuses_lossy_downgrades(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path, "memory-v3-kubelet-1.37.json")
    before = path.read_bytes()
    assert main(["checkpoint", "migrate", str(path), "--to", "1"]) == 1
    assert (
        f"refusing to migrate: V1 has no pod entries: the pod-level assignments (bubbles) of pod {POD}"
        in (capsys.readouterr().err)
    )
    assert path.read_bytes() == before
    v1 = _copy(tmp_path, "cpu-v1-kubelet-1.17.json")
    assert main(["checkpoint", "migrate", str(v1)]) == 1
    assert "keyed by container ID" in capsys.readouterr().err


def test_migrate_rejects_a_malformed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["checkpoint", "migrate", str(FIXTURES / "cpu-v4-data-only.json"), "--to", "latest"])
    assert caught.value.code == 2 and "not a layout version" in capsys.readouterr().err
