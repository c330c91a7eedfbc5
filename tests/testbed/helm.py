"""The Helm chart (deploy/helm/nri-podlevel) against the kustomize tree it mirrors.

`helm` is the field's own (helm.sh/helm/v4, built from the Go module proxy by `hack/build-go-tools`). Each
`SETTINGS` case pairs chart values with the kustomize directory that configures the same; `differences`
lists every object or field where the two renders disagree once the differences README names ("Installing
with Helm") are taken out by `normalise`:
- the chart creates no Namespace (`helm install --create-namespace`, then the Pod Security label);
- Helm's own labels (`app.kubernetes.io/managed-by`, `app.kubernetes.io/instance` except a pool's,
  `helm.sh/chart`) and the agent template's `nri-podlevel.io/config-checksum` annotation;
- kustomize's hash suffix on the agents' ConfigMap names (the chart rolls on the checksum instead);
- files held as text (the agent's config.yaml, the dashboard's JSON) compare as what they parse to.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from testbed.go_tools import build_tools
from testbed.manifests import DEPLOY, Manifest, describe, render_directory

CHART: Final = DEPLOY / "helm" / "nri-podlevel"
NAMESPACE: Final = "nri-podlevel"
HELM_LABELS: Final = ("app.kubernetes.io/managed-by", "helm.sh/chart")
CHECKSUM: Final = "nri-podlevel.io/config-checksum"
_HASHED_CONFIG: Final = re.compile(r"^(nri-podlevel-config(?:-[a-z0-9-]+?)?)-[a-z0-9]{10}$")


@dataclass(frozen=True)
class Setting:
    """Chart values and the kustomization (its `resources` and `components`, relative to deploy/) that
    configure the same cluster."""

    name: str
    values: Mapping[str, Any]
    resources: tuple[str, ...]
    components: tuple[str, ...] = ()


def _pool_config() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "pools" / "example" / "config.yaml").read_text()))


SETTINGS: Final = (
    Setting("defaults", {}, ("overlays/script-certs",)),
    Setting("cert-manager", {"webhook": {"certificate": "cert-manager"}}, ("overlays/cert-manager",)),
    Setting("fail-closed", {"webhook": {"failClosed": True}}, ("overlays/script-certs",),
            ("components/fail-closed",)),
    Setting("monitoring", {"monitoring": {"enabled": True}}, ("overlays/script-certs", "monitoring")),
    Setting("pool", {"pools": [{"name": "example", "config": "POOL"}]},
            ("overlays/script-certs", "pools/example")),
)


def helm() -> Path:
    return build_tools("helm")["helm"] / "helm"


def run_helm(*args: str, values: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
             timeout: float = 600) -> str:
    """helm with `values` in a file of their own; raises RuntimeError with helm's message."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values_file:
        yaml.safe_dump(dict(values or {}), values_file)
        values_file.flush()
        done = subprocess.run([str(helm()), *args, "--values", values_file.name] if values is not None
                              else [str(helm()), *args], capture_output=True, text=True, timeout=timeout,
                              check=False, env=None if env is None else dict(env))
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def resolved_values(setting: Setting) -> dict[str, Any]:
    values = copy.deepcopy(dict(setting.values))
    for pool in values.get("pools", []):
        if pool.get("config") == "POOL":
            pool["config"] = _pool_config()
    return values


def template(setting: Setting) -> list[Manifest]:
    out = run_helm("template", "nri-podlevel", str(CHART), "--namespace", NAMESPACE,
                   values=resolved_values(setting))
    return [doc for doc in yaml.safe_load_all(out) if doc]


def kustomize(setting: Setting) -> list[Manifest]:
    with tempfile.TemporaryDirectory(dir=DEPLOY.parent / ".cache") as tmp:
        directory = Path(tmp)
        kustomization: dict[str, Any] = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(DEPLOY / r, directory) for r in setting.resources]}
        if setting.components:
            kustomization["components"] = [os.path.relpath(DEPLOY / c, directory) for c in setting.components]
        (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return render_directory(directory)


def _unhash(name: str) -> str:
    match = _HASHED_CONFIG.match(name)
    return match.group(1) if match else name


def normalise(obj: Manifest, *, from_helm: bool) -> Manifest:
    """`obj` with the named differences taken out (module docstring)."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    labels = meta.get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    if from_helm and not labels.get("app.kubernetes.io/instance", "").startswith("pool-"):
        labels.pop("app.kubernetes.io/instance", None)
    meta["name"] = _unhash(meta["name"])
    if obj["kind"] == "ConfigMap":
        obj["data"] = {key: (json.loads(text) if key.endswith(".json") else yaml.safe_load(text))
                       for key, text in obj.get("data", {}).items()}
    if obj["kind"] == "DaemonSet":
        template_meta = obj["spec"]["template"]["metadata"]
        template_meta.get("annotations", {}).pop(CHECKSUM, None)
        if not template_meta.get("annotations"):
            template_meta.pop("annotations", None)
        for volume in obj["spec"]["template"]["spec"]["volumes"]:
            if "configMap" in volume:
                volume["configMap"]["name"] = _unhash(volume["configMap"]["name"])
    return obj


def _key(obj: Manifest) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), _unhash(obj["metadata"]["name"])


def _field_differences(path: str, kustomized: Any, charted: Any) -> Iterable[str]:
    if isinstance(kustomized, dict) and isinstance(charted, dict):
        for key in sorted(set(kustomized) | set(charted)):
            yield from _field_differences(f"{path}.{key}", kustomized.get(key), charted.get(key))
    elif isinstance(kustomized, list) and isinstance(charted, list) and len(kustomized) == len(charted):
        for index, (left, right) in enumerate(zip(kustomized, charted, strict=True)):
            yield from _field_differences(f"{path}[{index}]", left, right)
    elif kustomized != charted:
        yield f"{path}: kustomize {kustomized!r}, helm {charted!r}"


def differences(kustomized: list[Manifest], charted: list[Manifest]) -> list[str]:
    """Every object one render has and the other lacks, and every field that differs (after `normalise`);
    the kustomize Namespace is the one named absence."""
    left = {_key(o): normalise(o, from_helm=False) for o in kustomized if o["kind"] != "Namespace"}
    right = {_key(o): normalise(o, from_helm=True) for o in charted}
    found = [f"only in kustomize: {describe(left[k])}" for k in sorted(left.keys() - right.keys())]
    found += [f"only in the chart: {describe(right[k])}" for k in sorted(right.keys() - left.keys())]
    for key in sorted(left.keys() & right.keys()):
        found += [f"{describe(left[key])}: {line}" for line in _field_differences("", left[key], right[key])]
    return found
