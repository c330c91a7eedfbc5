"""`nri-podlevel simulate` through the installed console script: flags, JSON contract, tables, exit status."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from podlevel.cli.simulate import engine_config_of
from podlevel.engine.cpu_policy import CPUManagerOptions
from podlevel.engine.cpuset import CPUSet
from podlevel.engine.errors import InputError
from podlevel.engine.manager import EngineConfig
from podlevel.engine.topology import from_spec
from podlevel.engine.topology_manager import Scope, TopologyManagerOptions, TopologyPolicyName
from podlevel.report.views import engine_json
from support.builders import CHECKOUT, EXAMPLES, SMALL

SCRIPT = Path(sys.executable).with_name("nri-podlevel")
POLICIES = ["none", "best-effort", "restricted", "single-numa-node"]


def simulate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command = str(SCRIPT) if SCRIPT.exists() else shutil.which("nri-podlevel")
    assert command, "the nri-podlevel console script is not installed (pip install -e .)"
    return subprocess.run(
        [command, "simulate", *args], capture_output=True, text=True, timeout=60, input=stdin, check=False
    )


def simulate_json(*args: str) -> tuple[int, dict[str, Any]]:
    done = simulate("--json", *args)
    assert done.stderr == ""
    return done.returncode, json.loads(done.stdout)


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["containers"]}


@pytest.mark.parametrize("policy", POLICIES)
def test_pod_scope_mixed_json(policy: str) -> None:
    status, out = simulate_json(
        "--topology", SMALL, "--policy", policy, str(EXAMPLES / "pod-scope-mixed.yaml")
    )
    assert status == 0
    topology = from_spec(SMALL)
    assert out["topology"] == {
        "cpus": "0-15",
        "numa_nodes": {str(n): str(cpus) for n, cpus in topology.cpus_by_numa.items()},
    }
    [pod] = out["pods"]
    assert (pod["name"], pod["namespace"], pod["admitted"], pod["error"]) == (
        "pod-scope-mixed",
        "default",
        True,
        None,
    )
    bubble = CPUSet.parse(pod["bubble"]["cpus"])
    assert len(bubble) == 4 and len(topology.numa_nodes_of(bubble)) == 1
    assert pod["bubble"]["mems"] == str(topology.numa_nodes_of(bubble)[0])
    by_name = containers(pod)
    assert list(by_name) == ["metrics-sidecar", "logging-sidecar", "main-app"]
    main = by_name["main-app"]
    assert (main["kind"], main["assignment"], main["cpu_quota_us"], main["cpu_period_us"]) == (
        "app",
        "pod_exclusive",
        -1,
        100000,
    )
    assert len(CPUSet.parse(main["cpus"])) == 2
    for name in ("metrics-sidecar", "logging-sidecar"):
        sidecar = by_name[name]
        assert (sidecar["kind"], sidecar["assignment"], sidecar["cpu_quota_us"]) == (
            "sidecar",
            "pod_shared",
            200000,
        )
        assert CPUSet.parse(sidecar["cpus"]) == bubble - CPUSet.parse(main["cpus"])
    assert CPUSet.parse(out["node_shared_pool"]) == topology.all_cpus - bubble


@pytest.mark.parametrize("policy", POLICIES)
def test_empty_shared_pool_is_refused_under_pod_scope(policy: str) -> None:
    status, out = simulate_json(
        "--topology", SMALL, "--policy", policy, str(EXAMPLES / "empty-shared-pool.yaml")
    )
    assert status == 1
    [pod] = out["pods"]
    assert pod["admitted"] is False and pod["bubble"] is None and pod["containers"] == []
    assert pod["error"]["type"] == "EmptyPodSharedPoolError" and pod["error"]["message"]
    assert out["node_shared_pool"] == "0-15"


@pytest.mark.parametrize("policy", POLICIES)
def test_container_scope_mixed_json(policy: str) -> None:
    status, out = simulate_json(
        "--topology",
        SMALL,
        "--scope",
        "container",
        "--policy",
        policy,
        str(EXAMPLES / "container-scope-mixed.yaml"),
    )
    assert status == 0
    [pod] = out["pods"]
    assert pod["bubble"] is None
    by_name = containers(pod)
    infra = by_name["infrastructure-sidecar"]
    assert (infra["assignment"], infra["cpu_quota_us"]) == ("node_exclusive", -1)
    assert len(CPUSet.parse(infra["cpus"])) == 2
    for worker in ("worker-1", "worker-2"):
        assert by_name[worker]["assignment"] == "node_shared"
        assert by_name[worker]["cpu_quota_us"] is None
        assert by_name[worker]["cpus"] == out["node_shared_pool"]
    assert CPUSet.parse(out["node_shared_pool"]) == CPUSet.parse("0-15") - CPUSet.parse(infra["cpus"])


@pytest.mark.parametrize("scope", ["pod", "container"])
def test_all_examples_in_one_run(scope: str) -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    status, out = simulate_json("--topology", SMALL, "--scope", scope, *files)
    admitted = {p["name"]: p["admitted"] for p in out["pods"]}
    expected_refused = {"empty-shared-pool"} if scope == "pod" else set()
    assert {name for name, ok in admitted.items() if not ok} == expected_refused
    assert status == (1 if expected_refused else 0)
    held = [CPUSet.parse(p["bubble"]["cpus"]) for p in out["pods"] if p["bubble"] and p["bubble"]["cpus"]]
    held += [
        CPUSet.parse(c["cpus"])
        for p in out["pods"]
        for c in p["containers"]
        if c["assignment"] == "node_exclusive"
    ]
    union = CPUSet()
    for cpus in held:
        assert union.is_disjoint(cpus)
        union |= cpus
    assert union | CPUSet.parse(out["node_shared_pool"]) == CPUSet.parse("0-15")


def test_default_topology_flags_match_the_documented_defaults() -> None:
    status, out = simulate_json(
        "--topology",
        SMALL,
        "--scope",
        "pod",
        "--policy",
        "single-numa-node",
        "--reserved-memory",
        "0:memory=100Mi",
        "--reserved-cpus",
        "0,8",
        str(EXAMPLES / "pod-scope-mixed.yaml"),
    )
    assert status == 0
    assert out == simulate_json("--topology", SMALL, str(EXAMPLES / "pod-scope-mixed.yaml"))[1]


def test_reserved_cpus_and_options_are_applied() -> None:
    status, out = simulate_json(
        "--topology",
        SMALL,
        "--reserved-cpus",
        "0-1,8-9",
        "--cpu-options",
        "full-pcpus-only=true",
        "--topology-options",
        "prefer-closest-numa-nodes=true",
        str(EXAMPLES / "pod-scope-mixed.yaml"),
    )
    assert status == 0
    bubble = CPUSet.parse(out["pods"][0]["bubble"]["cpus"])
    assert bubble.is_disjoint(CPUSet.parse("0-1,8-9"))


def test_multi_document_input_from_stdin() -> None:
    text = (
        (EXAMPLES / "pod-scope-mixed.yaml").read_text()
        + "---\n"
        + (EXAMPLES / "container-scope-mixed.yaml").read_text()
    )
    done = simulate("--topology", SMALL, "--json", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    assert [p["name"] for p in json.loads(done.stdout)["pods"]] == [
        "pod-scope-mixed",
        "container-scope-mixed",
    ]


def test_a_deployment_is_admitted_as_its_replicas() -> None:
    [pod] = yaml.safe_load_all((EXAMPLES / "pod-scope-mixed.yaml").read_text())
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "mixed", "namespace": "shop"},
        "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "mixed"}}, "spec": pod["spec"]}},
    }
    status, out = simulate_json_stdin(yaml.safe_dump(deployment), "--topology", SMALL)
    assert [(p["namespace"], p["name"], p["admitted"]) for p in out["pods"]] == [
        ("shop", "mixed-0", True), ("shop", "mixed-1", True), ("shop", "mixed-2", True),
    ]
    bubbles = [CPUSet.parse(p["bubble"]["cpus"]) for p in out["pods"]]
    assert all(a.is_disjoint(b) for i, a in enumerate(bubbles) for b in bubbles[i + 1 :])
    assert status == 0


def simulate_json_stdin(text: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = simulate("--json", *args, "-", stdin=text)
    assert done.stderr == ""
    return done.returncode, json.loads(done.stdout)


def test_table_output_shows_nodes_holders_and_free_memory() -> None:
    done = simulate(
        "--topology", SMALL, str(EXAMPLES / "pod-scope-mixed.yaml"), str(EXAMPLES / "empty-shared-pool.yaml")
    )
    assert done.returncode == 1
    out = done.stdout
    assert "default/pod-scope-mixed  admitted  bubble cpus=" in out
    assert "default/empty-shared-pool  REFUSED  EmptyPodSharedPoolError" in out
    assert "main-app (pod_exclusive)" in out and "default/pod-scope-mixed pod shared pool" in out
    assert "node 0: cpus 0-3,8-11  free cpu=2 memory=" in out
    assert "reserved" in out
    assert "node 1: cpus 4-7,12-15  free cpu=8 memory=16Gi" in out
    assert "node shared pool" in out


def test_sysfs_topology(tmp_path: Path) -> None:
    from podlevel.sysfs import write_tree

    write_tree(from_spec(SMALL), tmp_path)
    status, out = simulate_json("--topology", f"sysfs={tmp_path}", str(EXAMPLES / "pod-scope-mixed.yaml"))
    assert status == 0
    assert out["topology"]["cpus"] == "0-15"
    assert out["topology"]["numa_nodes"] == {"0": "0-3,8-11", "1": "4-7,12-15"}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--topology", "sockets=1"], "nodes-per-socket is missing"),
        (["--topology", SMALL, "--policy", "strict"], "invalid choice"),
        (["--topology", SMALL, "--cpu-options", "no-such-option=true"], "no-such-option"),
        (["--topology", SMALL, "--topology-options", "prefer-closest-numa-nodes=maybe"], "prefer-closest"),
        (["--topology", SMALL, "--reserved-cpus", "64"], "reserved CPUs 64 are not on this machine"),
        (["--topology", SMALL, "--reserved-cpus", ""], "at least one reserved CPU"),
        (["--topology", SMALL, "--reserved-cpus", "a-b"], "cpuset"),
        (["--topology", SMALL, "--reserved-memory", "7:memory=1Gi"], "--reserved-memory"),
        (["--topology", SMALL, "--reserved-memory", "0:memory=lots"], "--reserved-memory"),
        (["--topology", SMALL, "/no/such/pod.yaml"], "/no/such/pod.yaml"),
        (["--topology", f"sysfs={CHECKOUT}/no-such-sysfs"], "no-such-sysfs"),
    ],
)
def test_bad_input_exits_2(args: list[str], fragment: str) -> None:
    if not any(a.endswith(".yaml") for a in args):
        args = [*args, str(EXAMPLES / "pod-scope-mixed.yaml")]
    done = simulate(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert fragment in done.stderr


def test_bad_manifest_exits_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: Pod\nmetadata: {name: x}\n"
        "spec: {containers: [{name: c, resources: {requests: {cpu: 2}, limits: {cpu: 1}}}]}\n"
    )
    done = simulate("--topology", SMALL, str(bad))
    assert done.returncode == 2
    assert "requests <= limits" in done.stderr and "spec.containers[0].resources.requests.cpu" in done.stderr


def test_the_same_pod_twice_is_bad_input() -> None:
    pod = str(EXAMPLES / "pod-scope-mixed.yaml")
    done = simulate("--topology", SMALL, pod, pod)
    assert done.returncode == 2 and "unique pods" in done.stderr


def test_help_lists_simulate() -> None:
    command = str(SCRIPT) if SCRIPT.exists() else shutil.which("nri-podlevel")
    assert command
    done = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "simulate" in done.stdout


def test_the_engine_settings_of_debug_node_give_the_plugins_engine_back() -> None:
    """`simulate --node` takes the plugin's settings from `/debug/node` as they are, not through flags."""
    topology = from_spec(SMALL)
    config = EngineConfig(
        scope=Scope.CONTAINER, topology_policy=TopologyPolicyName.RESTRICTED,
        topology_options=TopologyManagerOptions.parse({"prefer-closest-numa-nodes": "true"}),
        cpu_options=CPUManagerOptions.parse({"full-pcpus-only": "true"}, topology, "restricted"),
        reserved_cpus=CPUSet.parse("0-1"), reserved_memory={0: {"memory": 100 * 2**20}, 1: {"memory": 2**20}},
        cpu_policy="static", memory_policy="None",
    )
    assert engine_config_of(engine_json(config), topology) == config


def test_settings_this_version_does_not_know_are_refused_naming_them() -> None:
    document = engine_json(EngineConfig())
    with pytest.raises(InputError, match="'sometimes'"):
        engine_config_of({**document, "topology_policy": "sometimes"}, from_spec(SMALL))
    with pytest.raises(InputError, match="CPU policy 'dynamic'"):
        engine_config_of({**document, "cpu_policy": "dynamic"}, from_spec(SMALL))
