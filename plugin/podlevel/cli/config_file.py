"""The `run --config` YAML file: keys are flag names (`nri-socket: /run/nri/nri.sock`) or the kubelet's own
KubeletConfiguration keys, so an operator can paste the resource manager settings a kubelet already has.

A kubelet key is rewritten into the text of the flag that sets the same thing, in that flag's own syntax
(`reservedMemory`'s list of `{numaNode, limits}` becomes `--reserved-memory 0:memory=1Gi,...` items), and is
then parsed by the flag's own parser: types, choices and later checks are the flag's, and errors name the key.
The other KubeletConfiguration fields (`cpuCFSQuota`, `featureGates`, `kubeReserved`, ...) are accepted so a
whole kubelet config file can be given, and reported once as ignored; a key that is neither a flag name nor a
KubeletConfiguration field is an error.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from podlevel.cli.inputs import read_text
from podlevel.engine.errors import InputError

KUBELET_API_VERSION: Final = "kubelet.config.k8s.io/v1beta1"
KUBELET_KIND: Final = "KubeletConfiguration"

FLAG_OF_KUBELET_KEY: Final = MappingProxyType({
    "cpuManagerPolicy": "cpu-policy",
    "cpuManagerPolicyOptions": "cpu-options",
    "memoryManagerPolicy": "memory-policy",
    "topologyManagerPolicy": "policy",
    "topologyManagerScope": "scope",
    "topologyManagerPolicyOptions": "topology-options",
    "reservedSystemCPUs": "reserved-cpus",
    "reservedMemory": "reserved-memory",
})
"""Each kubelet key the plugin uses and the flag that sets the same thing."""

_OPTION_MAPS: Final = frozenset({"cpuManagerPolicyOptions", "topologyManagerPolicyOptions"})

# The KubeletConfiguration fields (kubelet.config.k8s.io/v1beta1, Kubernetes 1.37) the plugin has no use for.
_UNUSED_KUBELET_KEYS: Final = frozenset({
    "address", "allowedUnsafeSysctls", "authentication", "authorization", "cgroupDriver", "cgroupRoot",
    "cgroupsPerQOS", "clusterDNS", "clusterDomain", "configMapAndSecretChangeDetectionStrategy",
    "containerLogMaxFiles", "containerLogMaxSize", "containerLogMaxWorkers", "containerLogMonitorInterval",
    "containerRuntimeEndpoint", "contentType", "cpuCFSQuota", "cpuCFSQuotaPeriod",
    "cpuManagerReconcilePeriod", "crashLoopBackOff", "defaultPodSysctls", "enableContentionProfiling",
    "enableControllerAttachDetach", "enableDebugFlagsHandler", "enableDebuggingHandlers",
    "enableProfilingHandler", "enableServer", "enableSystemLogHandler", "enableSystemLogQuery",
    "enforceNodeAllocatable", "eventBurst", "eventRecordQPS", "evictionHard", "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim", "evictionPressureTransitionPeriod", "evictionSoft", "evictionSoftGracePeriod",
    "failCgroupV1", "failSwapOn", "featureGates", "fileCheckFrequency", "hairpinMode", "healthzBindAddress",
    "healthzPort", "httpCheckFrequency", "imageGCHighThresholdPercent", "imageGCLowThresholdPercent",
    "imageMaximumGCAge", "imageMinimumGCAge", "imagePullCredentialsVerificationPolicy",
    "imageServiceEndpoint", "iptablesDropBit", "iptablesMasqueradeBit", "kernelMemcgNotification",
    "kubeAPIBurst", "kubeAPIQPS", "kubeReserved", "kubeReservedCgroup", "kubeletCgroups",
    "localStorageCapacityIsolation", "logging", "makeIPTablesUtilChains", "maxOpenFiles",
    "maxParallelImagePulls", "maxPods", "memoryReservationPolicy", "memorySwap", "memoryThrottlingFactor",
    "mergeDefaultEvictionSettings", "nodeLeaseDurationSeconds", "nodeStatusMaxImages",
    "nodeStatusReportFrequency", "nodeStatusUpdateFrequency", "oomScoreAdj", "podCIDR", "podLogsDir",
    "podPidsLimit", "podsPerCore", "port", "preloadedImagesVerificationAllowlist", "protectKernelDefaults",
    "providerID", "qosReserved", "readOnlyPort", "registerNode", "registerWithTaints", "registryBurst",
    "registryPullQPS", "resolvConf", "rotateCertificates", "runOnce", "runtimeRequestTimeout",
    "seccompDefault", "serializeImagePulls", "serverTLSBootstrap", "showHiddenMetricsForVersion",
    "shutdownGracePeriod", "shutdownGracePeriodByPodPriority", "shutdownGracePeriodCriticalPods",
    "singleProcessOOMKill", "staticPodPath", "staticPodURL", "staticPodURLHeader",
    "streamingConnectionIdleTimeout", "syncFrequency", "systemCgroups", "systemReserved",
    "systemReservedCgroup", "tlsCertFile", "tlsCipherSuites", "tlsCurvePreferences", "tlsMinVersion",
    "tlsPrivateKeyFile", "tracing", "userNamespaces", "volumePluginDir", "volumeStatsAggPeriod"
})


@dataclass(frozen=True)
class Setting:
    """One setting from the file: the key as written and the value in its flag's syntax (a list of items
    for a repeatable flag)."""

    key: str
    value: str | list[str]


@dataclass(frozen=True)
class ConfigFile:
    """What a config file sets, and what it holds that has no effect here."""

    path: str
    settings: Mapping[str, Setting]
    """By argparse dest (`reserved_memory`)."""
    ignored: tuple[str, ...]
    """KubeletConfiguration fields present in the file that the plugin does not use."""

    def notice(self) -> str | None:
        """One line naming the ignored kubelet settings, so an operator who pasted a kubelet config knows
        which of its settings have no effect here."""
        if not self.ignored:
            return None
        return (f"config file {self.path}: ignoring kubelet settings the plugin does not use: "
                + ", ".join(self.ignored))


NO_FILE: Final = ConfigFile("", MappingProxyType({}), ())


def read_config(path: str, known: Collection[str]) -> ConfigFile:
    """The settings of the file at `path`; `known` are the dests its flag-name keys may set.

    Raises InputError (rule `--config`) naming the file and the key. PyYAML is imported here, for a file:
    `run` without one does without it.
    """
    from podlevel.podspec.yaml_documents import load_yaml_all

    try:
        # Every scalar stays the string it was written as: `plugin-index: 05` must not become 5, nor
        # `reserved-cpus: 010` the octal 8.
        documents = load_yaml_all(read_text(path), path, as_text=True)
    except OSError as err:
        raise InputError("--config", f"cannot read {path}: {err.strerror}") from None
    except InputError as err:
        raise InputError("--config", f"cannot read {path}: {err.rule}: {err.message}") from None
    if len(documents) > 1:
        raise InputError("--config", f"{path} holds {len(documents)} YAML documents, not one")
    loaded = (documents[0] if documents else None) or {}
    if not isinstance(loaded, dict):
        raise InputError("--config", f"{path} must hold a mapping of setting: value")
    _check_type_meta(path, loaded)
    settings: dict[str, Setting] = {}
    ignored: list[str] = []
    for key, value in loaded.items():
        if key in ("apiVersion", "kind"):
            continue
        if key in _UNUSED_KUBELET_KEYS:
            ignored.append(key)
            continue
        if key in FLAG_OF_KUBELET_KEY:
            dest = FLAG_OF_KUBELET_KEY[key].replace("-", "_")
            value = _flag_text(key, value, f"{path}: {key}")
        else:
            dest = str(key).replace("-", "_")
            if dest not in known:
                raise InputError("--config", f"{path}: unknown setting {key!r}: neither a flag name nor a "
                                             f"{KUBELET_KIND} field")
        if dest in settings:
            raise InputError("--config", f"{path}: {settings[dest].key!r} and {key!r} set the same setting "
                                         f"(--{dest.replace('_', '-')}); keep one")
        if value != "":  # `key:` with nothing after it leaves the setting alone
            settings[dest] = Setting(key, value)
    return ConfigFile(path, MappingProxyType(settings), tuple(ignored))


def _check_type_meta(path: str, loaded: dict[str, Any]) -> None:
    """A file that says what it is must say it is a KubeletConfiguration of the version read here."""
    expected = {"apiVersion": KUBELET_API_VERSION, "kind": KUBELET_KIND}
    for key, wanted in expected.items():
        if key in loaded and loaded[key] != wanted:
            raise InputError("--config", f"{path}: {key} must be {wanted}, not {loaded[key]!r}")


def _flag_text(key: str, value: Any, where: str) -> str | list[str]:
    """A kubelet key's value as its flag's text: a scalar as is, an option map as `k=v,...`, the
    reservedMemory list as one `node:resource=quantity,...` item per NUMA node."""
    if key in _OPTION_MAPS:
        return _key_values(value, where)
    if key == "reservedMemory":
        if not isinstance(value, list):
            raise InputError("--config", f"{where} must be a list of {{numaNode, limits}}")
        return [_reservation(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if not isinstance(value, str):
        raise InputError("--config", f"{where} must be a single value")
    return value


def _reservation(item: Any, where: str) -> str:
    if not isinstance(item, dict) or set(item) != {"numaNode", "limits"}:
        raise InputError("--config", f"{where} must be a mapping with exactly numaNode and limits")
    node = _plain(item["numaNode"], f"{where}.numaNode")
    return f"{node}:{_key_values(item['limits'], f'{where}.limits')}"


def _key_values(value: Any, where: str) -> str:
    if value == "":
        return ""
    if not isinstance(value, dict):
        raise InputError("--config", f"{where} must be a mapping of name: value")
    items = (f"{_plain(name, where)}={_plain(text, f'{where}.{name}')}" for name, text in value.items())
    return ",".join(items)


def _plain(value: Any, where: str) -> str:
    """A scalar that can be joined into flag text without changing its meaning."""
    if not isinstance(value, str) or any(separator in value for separator in ",=:"):
        raise InputError("--config", f"{where} must be one value without ',', '=' or ':', not {value!r}")
    return value
