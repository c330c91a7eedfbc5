"""The cluster's certificates and kubeconfigs (testbed.cluster), as the API server's authenticators read
them; what `hack/cluster` does with no cluster running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed import CHECKOUT, cluster


def subject(path: Path) -> tuple[str, list[str]]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    names = cert.subject
    return (str(names.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value),
            [str(a.value) for a in names.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)])


def test_each_component_is_the_user_and_groups_the_authorizers_know(tmp_path: Path) -> None:
    layout = cluster.Layout(tmp_path)
    layout.state.mkdir(exist_ok=True)
    cluster.make_pki(layout, 40123)
    assert subject(layout.pki / "kubelet.crt") == ("system:node:node-1", ["system:nodes"])
    assert subject(layout.pki / "admin.crt") == ("kubernetes-admin", ["system:masters"])
    assert subject(layout.pki / "kube-scheduler.crt") == ("system:kube-scheduler", [])
    client = x509.load_pem_x509_certificate((layout.pki / "kubelet.crt").read_bytes())
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    serving = x509.load_pem_x509_certificate((layout.pki / "apiserver.crt").read_bytes())
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1", cluster.GUEST_IP,
                                                                              cluster.KUBERNETES_SERVICE_IP}
    admin = yaml.safe_load(layout.kubeconfig.read_text())
    assert admin["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:40123"
    guest = yaml.safe_load(layout.component_kubeconfig("kubelet").read_text())
    assert guest["clusters"][0]["cluster"]["server"] == f"https://127.0.0.1:{cluster.API_PORT}"
    assert guest["users"][0]["user"]["client-certificate"] == str(layout.pki / "kubelet.crt")


def test_last_line_names_an_empty_log(tmp_path: Path) -> None:
    log = tmp_path / "etcd.log"
    assert cluster.last_line(log) == "(etcd.log is empty or missing)"
    log.write_text("one\ntwo\n\n")
    assert cluster.last_line(log) == "two"


def test_status_and_down_with_no_cluster(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "testbed.cluster"]
    env = {"PYTHONPATH": str(CHECKOUT / "tests"), "PATH": "/usr/bin:/bin"}
    status = subprocess.run([*run, "status", "--state", str(tmp_path / "none")], capture_output=True,
                            text=True, env=env, check=False, timeout=60)
    assert status.returncode == 1 and "none runs" in status.stderr
    down = subprocess.run([*run, "down", "--state", str(tmp_path / "none")], capture_output=True, text=True,
                          env=env, check=False, timeout=60)
    assert down.returncode == 0 and not (tmp_path / "none").exists()
