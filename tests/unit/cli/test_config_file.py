"""`nri-podlevel run --config` with the kubelet's KubeletConfiguration keys: each sets what its flag sets,
through the flag's parser; conflicts, unknown keys and bad shapes name the key and the file."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from podlevel.cli.config_file import FLAG_OF_KUBELET_KEY
from podlevel.cli.engine_flags import engine_config
from podlevel.cli.run import resolve
from podlevel.engine.errors import InputError
from podlevel.engine.topology import from_spec
from podlevel.engine.topology_manager import Scope, TopologyPolicyName
from support.builders import GI, MI, SMALL

# The resource manager part of a kubelet config file, with the field names and values of the Kubernetes
# documentation's CPU, Memory and Topology Manager pages, and the neighbours such a file always has.
KUBELET_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
featureGates:
  CPUManagerPolicyAlphaOptions: true
cgroupDriver: systemd
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
cpuManagerReconcilePeriod: 10s
memoryManagerPolicy: Static
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
reservedSystemCPUs: "0,8"
kubeReserved:
  cpu: 500m
  memory: 1Gi
systemReserved:
  memory: 500Mi
evictionHard:
  memory.available: 100Mi
reservedMemory:
  - numaNode: 0
    limits:
      memory: 1124Mi
  - numaNode: 1
    limits:
      memory: 500Mi
"""


def settings(
    tmp_path: Path, text: str, argv: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> argparse.Namespace:
    config = tmp_path / "kubelet-config.yaml"
    config.write_text(text)
    return resolve(["--config", str(config), *argv], env or {})


# Each kubelet key, a value as a kubelet config writes it, and the flag setting it must become.
KUBELET_KEYS = [
    ("cpuManagerPolicy", "none", "cpu_policy", "none"),
    ("cpuManagerPolicyOptions", "{full-pcpus-only: 'true', strict-cpu-reservation: 'true'}", "cpu_options",
     "full-pcpus-only=true,strict-cpu-reservation=true"),
    ("memoryManagerPolicy", "None", "memory_policy", "None"),
    ("topologyManagerPolicy", "best-effort", "policy", "best-effort"),
    ("topologyManagerScope", "container", "scope", "container"),
    ("topologyManagerPolicyOptions", "{prefer-closest-numa-nodes: 'true'}", "topology_options",
     "prefer-closest-numa-nodes=true"),
    ("reservedSystemCPUs", "0-1", "reserved_cpus", "0-1"),
    ("reservedMemory", "[{numaNode: 0, limits: {memory: 1Gi}}]", "reserved_memory", ["0:memory=1Gi"]),
]


@pytest.mark.parametrize(("key", "written", "dest", "value"), KUBELET_KEYS)
def test_each_kubelet_key_sets_its_flag(
    tmp_path: Path, key: str, written: str, dest: str, value: str | list[str]
) -> None:
    args = settings(tmp_path, f"{key}: {written}\n")
    assert getattr(args, dest) == value
    assert args.sources[f"--{dest.replace('_', '-')}"].endswith(f"kubelet-config.yaml, key {key}")
    assert args.notices == []


def test_every_mapped_key_is_tested() -> None:
    assert set(FLAG_OF_KUBELET_KEY) == {
        "cpuManagerPolicy", "cpuManagerPolicyOptions", "memoryManagerPolicy", "topologyManagerPolicy",
        "topologyManagerScope", "topologyManagerPolicyOptions", "reservedSystemCPUs", "reservedMemory",
    }


def test_reserved_memory_list_form_with_several_nodes(tmp_path: Path) -> None:
    args = settings(tmp_path, (
        "reservedMemory:\n"
        "  - numaNode: 0\n    limits:\n      memory: 1Gi\n      hugepages-2Mi: 4Mi\n"
        "  - numaNode: 1\n    limits: {memory: 512Mi, hugepages-1Gi: '0'}\n"
    ))
    assert args.reserved_memory == ["0:memory=1Gi,hugepages-2Mi=4Mi", "1:memory=512Mi,hugepages-1Gi=0"]
    reserved = engine_config(args, from_spec(SMALL)).reserved_memory
    assert {node: dict(values) for node, values in reserved.items()} == {
        0: {"memory": GI, "hugepages-2Mi": 4 * MI},
        1: {"memory": 512 * MI, "hugepages-1Gi": 0},
    }


def test_a_pasted_kubelet_configuration(tmp_path: Path) -> None:
    args = settings(tmp_path, KUBELET_CONFIG)
    config = engine_config(args, from_spec(SMALL))
    assert (config.scope, config.topology_policy) == (Scope.POD, TopologyPolicyName.SINGLE_NUMA_NODE)
    assert (config.cpu_policy, config.memory_policy) == ("static", "Static")
    assert config.cpu_options.enabled("full-pcpus-only")
    assert config.topology_options.prefer_closest_numa_nodes
    assert str(config.reserved_cpus) == "0,8"
    assert {node: dict(values) for node, values in config.reserved_memory.items()} == {
        0: {"memory": 1124 * MI}, 1: {"memory": 500 * MI},
    }
    assert args.notices == [
        f"config file {tmp_path / 'kubelet-config.yaml'}: ignoring kubelet settings the plugin does not use: "
        "featureGates, cgroupDriver, cpuManagerReconcilePeriod, kubeReserved, systemReserved, evictionHard"
    ]


def test_kubelet_keys_keep_the_precedence(tmp_path: Path) -> None:
    args = settings(tmp_path, "topologyManagerScope: container\ntopologyManagerPolicy: restricted\n"
                              "reservedSystemCPUs: 0-1\n",
                    argv=("--reserved-cpus", "0"), env={"NRI_PODLEVEL_SCOPE": "pod"})
    assert (args.reserved_cpus, args.scope, args.policy) == ("0", "pod", "restricted")


def test_flag_names_and_kubelet_keys_mix(tmp_path: Path) -> None:
    text = "kind: KubeletConfiguration\ntopologyManagerPolicy: restricted\nlog-level: debug\n"
    args = settings(tmp_path, text)
    assert (args.policy, args.log_level) == ("restricted", "debug")


@pytest.mark.parametrize(("key", "written", "dest", "value"), KUBELET_KEYS)
def test_a_setting_given_twice_names_both_keys(
    tmp_path: Path, key: str, written: str, dest: str, value: str | list[str]
) -> None:
    flag_key = dest.replace("_", "-")
    for text in (f"{key}: {written}\n{flag_key}: {json.dumps(value)}\n",
                 f"{flag_key}: {json.dumps(value)}\n{key}: {written}\n"):
        with pytest.raises(InputError) as err:
            settings(tmp_path, text)
        assert f"'{key}'" in err.value.message and f"'{flag_key}'" in err.value.message
        assert "kubelet-config.yaml" in err.value.message and "keep one" in err.value.message


@pytest.mark.parametrize("key", ["topologyManagerPolcy", "cpuManagerPolicyOption", "reserved-system-cpus",
                                 "kubeletConfiguration"])
def test_unknown_keys_are_errors_naming_key_and_file(tmp_path: Path, key: str) -> None:
    with pytest.raises(InputError) as err:
        settings(tmp_path, KUBELET_CONFIG + f"{key}: x\n")
    assert f"kubelet-config.yaml: unknown setting {key!r}" in err.value.message


@pytest.mark.parametrize(("text", "message"), [
    ("kind: KubeProxyConfiguration\n", "kind must be KubeletConfiguration, not 'KubeProxyConfiguration'"),
    ("apiVersion: kubeproxy.config.k8s.io/v1alpha1\n", "apiVersion must be kubelet.config.k8s.io/v1beta1"),
])
def test_a_document_of_another_kind_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        settings(tmp_path, text + "topologyManagerPolicy: restricted\n")


@pytest.mark.parametrize(("text", "message"), [
    ("topologyManagerScope: Pod\n", "invalid choice: 'Pod'"),
    ("memoryManagerPolicy: static\n", "invalid choice: 'static'"),
    ("cpuManagerPolicy: Static\n", "invalid choice: 'Static'"),
    ("topologyManagerPolicy: sometimes\n", "invalid choice: 'sometimes'"),
], ids=["scope", "memory-policy", "cpu-policy", "policy"])
def test_bad_values_are_checked_by_the_flags_parser_and_name_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    key = text.partition(":")[0]
    with pytest.raises(InputError) as err:
        settings(tmp_path, text)
    assert message in err.value.message
    assert f"--{FLAG_OF_KUBELET_KEY[key]} from the config file" in err.value.message
    assert f"kubelet-config.yaml, key {key}" in err.value.message


@pytest.mark.parametrize(("text", "where"), [
    ("reservedMemory: '0:memory=1Gi'\n", "reservedMemory must be a list"),
    ("reservedMemory:\n- numaNode: 0\n",
     "reservedMemory[0] must be a mapping with exactly numaNode and limits"),
    ("reservedMemory:\n- {numaNode: 0, limits: {memory: 1Gi}}\n- {numaNode: 1, limit: {memory: 1Gi}}\n",
     "reservedMemory[1] must be a mapping"),
    ("reservedMemory:\n- {numaNode: '0,1', limits: {memory: 1Gi}}\n",
     "reservedMemory[0].numaNode must be one value without ',', '=' or ':'"),
    ("reservedMemory:\n- {numaNode: 0, limits: [memory]}\n", "reservedMemory[0].limits must be a mapping"),
    ("reservedMemory:\n- {numaNode: 0, limits: {memory: {a: b}}}\n",
     "reservedMemory[0].limits.memory must be one value"),
    ("cpuManagerPolicyOptions: full-pcpus-only=true\n", "cpuManagerPolicyOptions must be a mapping"),
    ("topologyManagerPolicyOptions: [prefer-closest-numa-nodes]\n", "topologyManagerPolicyOptions must be a"),
    ("cpuManagerPolicyOptions:\n  'a,b': 'true'\n", "cpuManagerPolicyOptions must be one value"),
    ("topologyManagerPolicy: [restricted]\n", "topologyManagerPolicy must be a single value"),
    ("reservedSystemCPUs: {cpus: 0}\n", "reservedSystemCPUs must be a single value"),
])
def test_bad_shapes_name_the_key_and_the_file(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(InputError) as err:
        settings(tmp_path, text)
    assert err.value.rule == "--config"
    assert f"kubelet-config.yaml: {where}" in err.value.message


def test_empty_kubelet_values_leave_the_setting_alone(tmp_path: Path) -> None:
    args = settings(tmp_path, "topologyManagerPolicy:\ncpuManagerPolicyOptions: {}\nreservedMemory: []\n")
    assert (args.policy, args.cpu_options, args.reserved_memory) == ("single-numa-node", "", None)


def test_the_daemon_logs_the_ignored_keys_and_names_the_key_of_a_later_error(tmp_path: Path) -> None:
    config = tmp_path / "kubelet-config.yaml"
    config.write_text("cpuCFSQuota: true\nfeatureGates: {PodLevelResources: true}\nreservedSystemCPUs: 1-0\n")
    result = subprocess.run(
        [sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", str(tmp_path / "absent.sock"),
         "--config", str(config)],
        capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2, result.stderr
    assert f"config file {config}: ignoring kubelet settings the plugin does not use: cpuCFSQuota, " \
           "featureGates" in result.stderr
    assert "not ascending" in result.stderr
    assert f"--reserved-cpus from the config file {config}, key reservedSystemCPUs" in result.stderr
