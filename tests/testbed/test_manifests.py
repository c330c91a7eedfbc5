"""deploy/: every overlay renders with kustomize and every object validates against the Kubernetes schemas;
the webhook, its certificate paths, the node files and the image recipe fit together."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import dockerfile
import pytest
import yaml

from podlevel.cli.main import build_parser, main
from podlevel.cli.mounts import MOUNTS
from podlevel.cli.run import DEFAULT_NAME, resolve
from podlevel.engine.topology import from_spec
from podlevel.podspec.manifest import SHAPE_ANNOTATION
from podlevel.sysfs.writer import write_tree
from testbed.kind import check_cluster_config, webhook_certificate
from testbed.manifests import (
    CHECKOUT,
    DEPLOY,
    KIND_CLUSTER,
    OVERLAYS,
    Manifest,
    ManifestError,
    check,
    containerd_snippet,
    find,
    render,
    render_directory,
)

NAMESPACE = "nri-podlevel"
SERVICE_DNS = "nri-podlevel-webhook.nri-podlevel.svc"


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> list[Manifest]:
    return render(request.param)


def _pod_spec(workload: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def test_every_object_validates(rendered: list[Manifest]) -> None:
    check(rendered, "render")
    kinds = {o["kind"] for o in rendered}
    assert {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Deployment", "Service",
            "PodDisruptionBudget", "MutatingWebhookConfiguration"} <= kinds
    assert all(o["metadata"].get("namespace") == NAMESPACE for o in rendered
               if o["kind"] not in ("Namespace", "MutatingWebhookConfiguration"))


def test_validation_is_strict() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prots": []}}
    with pytest.raises(ManifestError, match=r"Service x: spec: .*'prots' was unexpected"):
        check([service], "typo")


def test_daemonset_mounts_what_its_flags_name(rendered: list[Manifest], tmp_path: Path) -> None:
    """Its args are `run` settings, with the ConfigMap it mounts as `--config`; every host path it names is
    mounted, and it runs with no capabilities and not privileged."""
    (daemonset,) = find(rendered, "DaemonSet")
    spec = _pod_spec(daemonset)
    (container,) = spec["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    config_volume = next(name for name, v in volumes.items() if "configMap" in v)
    (config_map,) = find(rendered, "ConfigMap", volumes[config_volume]["configMap"]["name"])
    (tmp_path / "config.yaml").write_text(config_map["data"]["config.yaml"])
    args = [a.replace(mounts[config_volume]["mountPath"], str(tmp_path)) for a in container["args"][1:]]
    assert build_parser().parse_args(container["args"]).handler.__module__ == "podlevel.cli.run"
    settings = resolve(args, {})
    assert settings.sysfs_root == "/host/sys"
    assert (settings.policy, settings.cpu_policy, settings.memory_policy) == \
        ("single-numa-node", "static", "Static")
    named = {settings.sysfs_root: True, settings.cgroup_root: False, settings.state_dir: False,
             str(Path(settings.nri_socket).parent): True,
             str(Path(settings.podresources_socket).parent): False}
    by_path = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path, read_only in named.items():
        assert path in by_path, f"{path} is not mounted"
        assert by_path[path].get("readOnly", False) is read_only, path
        assert "hostPath" in volumes[by_path[path]["name"]]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert spec["priorityClassName"] == "system-node-critical"
    assert by_path[settings.sysfs_root]["recursiveReadOnly"] == "IfPossible"
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert container["livenessProbe"]["timeoutSeconds"] and container["readinessProbe"]["timeoutSeconds"]
    probes = {container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]}
    assert probes == {"/healthz", "/readyz"}
    startup = container["startupProbe"]  # liveness waits for a slow start (seen on a busy node: a kill loop)
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_webhook_wiring(rendered: list[Manifest]) -> None:
    """The configuration reaches the Service, the Service the pods' port, the port the `--address`."""
    (configuration,) = find(rendered, "MutatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    assert (webhook["failurePolicy"], webhook["sideEffects"], webhook["reinvocationPolicy"]) == \
        ("Ignore", "None", "IfNeeded")
    assert webhook["timeoutSeconds"] <= 10
    service_ref = webhook["clientConfig"]["service"]
    (service,) = find(rendered, "Service", service_ref["name"])
    assert (service_ref["namespace"], service_ref["path"]) == (service["metadata"]["namespace"], "/mutate")
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == service_ref["port"]]
    (deployment,) = find(rendered, "Deployment")
    (container,) = _pod_spec(deployment)["containers"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert f"--address=:{target['containerPort']}" in container["args"]
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and {"kube-system", NAMESPACE} <= set(excluded["values"])
    assert webhook["objectSelector"]["matchExpressions"] == [
        {"key": "nri-podlevel.io/webhook", "operator": "NotIn", "values": ["disabled"]}]
    (condition,) = webhook["matchConditions"]
    assert "has(object.spec.resources)" in condition["expression"], "pods with pod-level resources are sent"
    assert f"'{SHAPE_ANNOTATION}' in object.metadata.annotations" in condition["expression"], \
        "pods with a (forged) shape are sent, to lose it"
    assert _pod_spec(deployment)["securityContext"]["runAsNonRoot"] is True


def test_cert_manager_overlay_issues_the_mounted_secret() -> None:
    objects = render("cert-manager")
    (certificate,) = find(objects, "Certificate")
    (issuer,) = find(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    assert "selfSigned" in issuer["spec"]
    (deployment,) = find(objects, "Deployment")
    assert {"secret": {"secretName": certificate["spec"]["secretName"]}, "name": "tls"} in \
        _pod_spec(deployment)["volumes"]
    assert SERVICE_DNS in certificate["spec"]["dnsNames"]
    (configuration,) = find(objects, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"


def test_script_certificate_serves_the_service(tmp_path: Path) -> None:
    secret, configuration = webhook_certificate(render("script-certs"), tmp_path)
    assert secret["type"] == "kubernetes.io/tls"
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"]
    verify = subprocess.run(["openssl", "verify", "-CAfile", tmp_path / "ca.crt", tmp_path / "tls.crt"],
                            capture_output=True, text=True, check=True)
    assert verify.stdout.strip().endswith(": OK")
    names = subprocess.run(
        ["openssl", "x509", "-in", tmp_path / "tls.crt", "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True).stdout
    assert f"DNS:{SERVICE_DNS}," in names
    assert not (tmp_path / "ca.key").exists(), "the CA key is thrown away"


@pytest.mark.parametrize(("version", "config_version", "cri"),
                         [("1.7", 2, "io.containerd.grpc.v1.cri"), ("2", 3, "io.containerd.cri.v1.runtime")])
def test_containerd_snippets(version: str, config_version: int, cri: str) -> None:
    snippet = containerd_snippet(version)
    assert snippet["version"] == config_version
    assert snippet["plugins"]["io.containerd.nri.v1.nri"]["disable"] is False
    assert snippet["plugins"]["io.containerd.nri.v1.nri"]["socket_path"] == "/var/run/nri/nri.sock"
    assert "SystemdCgroup" in snippet["plugins"][cri]["containerd"]["runtimes"]["runc"]["options"]


def test_kubelet_fragment_turns_every_manager_off() -> None:
    """The kubelet's own key spellings, as the plugin's config reader checks them (`None`, not `none`)."""
    settings = resolve(["--config", str(DEPLOY / "node" / "kubelet-config.yaml")], {})
    assert (settings.cpu_policy, settings.memory_policy, settings.policy) == ("none", "None", "none")


def test_kind_config_agrees_with_the_node_files(tmp_path: Path) -> None:
    check_cluster_config()
    drifted = tmp_path / "cluster.yaml"
    drifted.write_text(KIND_CLUSTER.read_text().replace("memoryManagerPolicy: None",
                                                        "memoryManagerPolicy: Static"))
    with pytest.raises(ManifestError, match="KubeletConfiguration patch"):
        check_cluster_config(drifted)


def test_kind_e2e_dry_run() -> None:
    done = subprocess.run([CHECKOUT / "hack" / "kind-e2e", "--dry-run"], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("validated: deploy/overlays/script-certs rendered")
    for command in ("kind create cluster", "hack/image", "kind load image-archive",
                    "nri-podlevel-0.1.0.tar", "apply -f", "hack/webhook-certs", "rollout status",
                    "pod-scope-mixed.yaml", "empty-shared-pool.yaml", "kind delete cluster"):
        assert command in out, command
    assert out.rstrip().endswith("nothing run")


CONTAINERFILE = DEPLOY / "Containerfile"
HACK_IMAGE = CHECKOUT / "hack" / "image"
INSTRUCTIONS = {"FROM", "ARG", "WORKDIR", "COPY", "RUN", "USER", "ENTRYPOINT", "ENV", "LABEL"}


def test_containerfile() -> None:
    """BuildKit's own parser reads it; the base is a pinned slim tag; it copies only what hack/image puts in
    the context (wheels and pip's wheel, no sources); the image installs only those wheels, offline, holds no
    pip, runs non-root, runs the CLI; the manifests run the project's version."""
    commands = dockerfile.parse_file(str(CONTAINERFILE))
    assert {c.cmd.upper() for c in commands} <= INSTRUCTIONS
    args = [c.value[0] for c in commands if c.cmd.upper() == "ARG"]
    assert args[0] == "BASE=python:3.11-slim-bookworm"
    assert [c.value[0] for c in commands if c.cmd.upper() == "FROM"] == ["${BASE}", "${BASE}"]
    copied = {source for c in commands if c.cmd.upper() == "COPY" and not c.flags for source in c.value[:-1]}
    assert copied == {"wheels", "pip.whl"}
    assert "wheels" in HACK_IMAGE.read_text() and "pip.whl" in HACK_IMAGE.read_text()
    (install,) = [c.value[0] for c in commands if c.cmd.upper() == "RUN"]
    assert "--no-index --find-links /wheels nri-podlevel" in install
    final = commands[max(i for i, c in enumerate(commands) if c.cmd.upper() == "FROM"):]
    assert [c.cmd.upper() for c in final] == ["FROM", "COPY", "ENV", "USER", "ENTRYPOINT"]
    assert final[2].value[:2] == ("PATH", "/opt/nri-podlevel/bin:$PATH")
    assert final[1].flags == ("--from=install",)
    (user,) = [c.value[0] for c in final if c.cmd.upper() == "USER"]
    assert int(user.split(":")[0]) != 0
    assert commands[-1].value == ("/opt/nri-podlevel/bin/nri-podlevel",)
    version = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "nri-podlevel", "newTag": version}]


def test_the_agents_node_paths_are_named_by_the_daemonsets_volumes() -> None:
    """`run --on-missing-mount=wait` names the DaemonSet volume of a missing path (`cli.mounts.MOUNTS`):
    every flag there is set in the DaemonSet to a path inside the volume it names."""
    [daemonset] = find(render("script-certs"), "DaemonSet", "nri-podlevel")
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    flags = dict(arg.split("=", 1) for arg in container["args"] if arg.startswith("--") and "=" in arg)
    assert flags["--on-missing-mount"] == "wait"
    mounted = {m["name"]: Path(m["mountPath"]) for m in container["volumeMounts"]}
    for mount in MOUNTS:
        path = Path(flags[mount.flag])
        inside = path.parent if mount.directory_of else path
        assert inside == mounted[mount.volume] or mounted[mount.volume] in inside.parents, mount


POOL_MACHINE = "sockets=2,nodes-per-socket=1,cores-per-node=32,threads-per-core=2"
"""The machine deploy/pools/example's settings are written for."""


def test_a_node_pool_runs_its_own_agent_with_its_own_settings_and_the_default_agent_stays_off_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = render_directory(DEPLOY / "pools" / "example")
    check(pool, "deploy/pools/example")
    (default,) = find(render("script-certs"), "DaemonSet")
    (agent,) = find(pool, "DaemonSet")
    assert agent["metadata"]["name"] == "nri-podlevel-example"

    def requirement(daemonset: Manifest) -> dict[str, Any]:
        affinity = _pod_spec(daemonset)["affinity"]["nodeAffinity"]
        terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        (term,) = terms["nodeSelectorTerms"]
        (expression,) = term["matchExpressions"]
        return dict(expression)

    assert requirement(default) == {"key": "nri-podlevel.io/pool", "operator": "DoesNotExist"}
    assert requirement(agent) == {"key": "nri-podlevel.io/pool", "operator": "In", "values": ["example"]}
    assert _pod_spec(agent)["nodeSelector"] == _pod_spec(default)["nodeSelector"]
    selector = agent["spec"]["selector"]["matchLabels"]
    assert not default["spec"]["selector"]["matchLabels"].items() <= agent["spec"]["template"]["metadata"][
        "labels"].items(), "the default DaemonSet must not select the pool's pods"
    assert selector.items() <= agent["spec"]["template"]["metadata"]["labels"].items()
    (config_map,) = find(pool, "ConfigMap")
    assert any(v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
               for v in _pod_spec(agent)["volumes"])
    settings = tmp_path / "config.yaml"
    settings.write_text(config_map["data"]["config.yaml"])
    sysfs = write_tree(from_spec(POOL_MACHINE), tmp_path / "sys")
    assert main(["config", "check", str(settings), "--sysfs-root", str(sysfs)]) == 0
    assert "reserved CPUs 0,32,64,96" in capsys.readouterr().out


def test_the_fail_closed_component_marks_shaped_pods_as_requiring_the_plugin(tmp_path: Path) -> None:
    """Added to an overlay, it gives the webhook `--require-plugin` with the agent's own NRI name; the node
    snippet turns on the validator that enforces it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "overlays" / "script-certs", overlay)],
        "components": [os.path.relpath(DEPLOY / "components" / "fail-closed", overlay)],
    }))
    rendered = check(render_directory(overlay), "fail-closed")
    (webhook,) = find(rendered, "Deployment")
    (container,) = webhook["spec"]["template"]["spec"]["containers"]
    (daemonset,) = find(rendered, "DaemonSet")
    assert not any(a.startswith("--plugin-name") for a in _pod_spec(daemonset)["containers"][0]["args"])
    assert f"--require-plugin={DEFAULT_NAME}" in container["args"], "the agent's NRI name, as it registers"
    nri = containerd_snippet("nri-validator")["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["default_validator"]["enable"] is True
