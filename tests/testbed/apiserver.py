"""The API server's part in creating a pod, for the test bed: the manifest gets the defaults the API server
and its built-in admission plugins apply, goes to the mutating admission webhook (`nri-podlevel webhook`,
a real process over real TLS) as an AdmissionReview v1, and the JSON Patch it answers is applied; then the
name (`generateName`) and uid are set, and the kubelet-like driver starts the pod with the annotations the
pod was stored with. So the pod-shape annotation comes from the webhook, never from the test bed.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import secrets
import ssl
import sys
import uuid
from pathlib import Path
from typing import Any, Final

import jsonpatch

from podlevel.podspec.manifest import pod_from_manifest
from testbed.cri import CRI
from testbed.kubelet import StartedPod, start_annotated_pod
from testbed.plugin_process import LoggedProcess, free_port
from testbed.tls import TestCA

SERVING: Final = "serving the admission webhook on"
START_TIMEOUT_S: Final = 30.0
REVIEW_TIMEOUT_S: Final = 10.0
"""The API server's default `timeoutSeconds` for a webhook."""
SERVICE_NAME: Final = "nri-podlevel-webhook.nri-podlevel.svc"
_TOKEN_MOUNT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
_NOT_READY_TOLERATIONS: Final = [
    {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300}
    for taint in ("not-ready", "unreachable")
]


class WebhookEndpoint:
    """How the API server reaches the webhook: HTTPS to `address`, trusting `ca_file` (the configuration's
    `caBundle`)."""

    address: tuple[str, int]
    ca_file: Path

    def client_context(self) -> ssl.SSLContext:
        """What the API server does with the configuration's `caBundle`: trust the CA, check the name."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.check_hostname = False  # the certificate names the Service; the test reaches an address
        return context

    def post(self, body: bytes, *, path: str = "/mutate", headers: dict[str, str] | None = None) -> bytes:
        """One POST on a new connection; the response body (the status must be 200)."""
        connection = http.client.HTTPSConnection(*self.address, timeout=REVIEW_TIMEOUT_S,
                                                 context=self.client_context())
        try:
            connection.request("POST", path, body=body,
                               headers={"Content-Type": "application/json", **(headers or {})})
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"webhook answered {response.status}: {answer[:200]!r}")
            return answer
        finally:
            connection.close()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        """The `response` of the webhook's AdmissionReview for `request`."""
        document = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        answer: dict[str, Any] = json.loads(self.post(json.dumps(document).encode()))
        assert answer["kind"] == "AdmissionReview" and answer["apiVersion"] == "admission.k8s.io/v1"
        response: dict[str, Any] = answer["response"]
        assert response["uid"] == request["uid"] and response["allowed"] is True
        return response


class RemoteWebhook(WebhookEndpoint):
    """A webhook served elsewhere (its container in the test bed), reached at `address`."""

    def __init__(self, address: tuple[str, int], ca_file: Path) -> None:
        self.address = address
        self.ca_file = ca_file


class WebhookProcess(WebhookEndpoint, LoggedProcess):
    """`nri-podlevel webhook` on a free loopback port, with a serving certificate from a throw-away CA
    (`ca`) in `directory`; `ca.issue(...)` again rotates it on disk."""

    def __init__(self, directory: Path, *, prefix: str = "  webhook | ", echo: bool = True,
                 extra: tuple[str, ...] = ()) -> None:
        self.ca = TestCA(directory)
        self.serving = self.ca.issue(SERVICE_NAME)
        self.address = ("127.0.0.1", free_port())
        self.ca_file = self.ca.ca_file
        command = [
            sys.executable, "-m", "podlevel.cli.main", "webhook", "--address", f"127.0.0.1:{self.address[1]}",
            "--tls-cert-file", str(self.serving.cert_file),
            "--tls-private-key-file", str(self.serving.key_file), "--log-format", "json", *extra,
        ]
        super().__init__(command, name="nri-podlevel webhook", prefix=prefix, echo=echo)

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> str:
        return self.wait_for_line(SERVING, timeout)


def with_api_defaults(manifest: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    """The Pod as the webhook receives it: the API server's defaults and those of its built-in admission
    plugins (ServiceAccount, DefaultTolerationSeconds) applied; requests defaulted from limits."""
    pod = copy.deepcopy(manifest)
    metadata = pod.setdefault("metadata", {})
    metadata.setdefault("namespace", namespace)
    metadata.setdefault("creationTimestamp", None)
    spec = pod["spec"]
    for key, value in (
        ("restartPolicy", "Always"), ("terminationGracePeriodSeconds", 30), ("dnsPolicy", "ClusterFirst"),
        ("serviceAccountName", "default"), ("serviceAccount", "default"), ("securityContext", {}),
        ("schedulerName", "default-scheduler"), ("priority", 0), ("enableServiceLinks", True),
        ("preemptionPolicy", "PreemptLowerPriority"),
    ):
        spec.setdefault(key, value)
    spec.setdefault("tolerations", []).extend(copy.deepcopy(_NOT_READY_TOLERATIONS))
    volume = f"kube-api-access-{secrets.token_hex(3)[:5]}"
    spec.setdefault("volumes", []).append({"name": volume, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    ]}})
    _default_requests(spec.get("resources"))
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            image = str(container.get("image", ""))
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})
            _default_requests(container["resources"])
            container.setdefault("volumeMounts", []).append(
                {"name": volume, "readOnly": True, "mountPath": _TOKEN_MOUNT})
    return pod


def _default_requests(resources: dict[str, Any] | None) -> None:
    """A limit without a request makes the request equal (containers, and the pod-level budget)."""
    if not resources or not resources.get("limits"):
        return
    requests = resources.setdefault("requests", {})
    for name, limit in resources["limits"].items():
        requests.setdefault(name, limit)


def create_request(pod: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview request for creating `pod` (defaults applied; no name yet with generateName)."""
    metadata = pod["metadata"]
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": metadata.get("name", ""),
        "namespace": metadata["namespace"],
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }


def admit(webhook: WebhookEndpoint, manifest: dict[str, Any]) -> dict[str, Any]:
    """The Pod as the API server stores it: defaults, the webhook's patch, then name and uid."""
    pod = with_api_defaults(manifest)
    response = webhook.review(create_request(pod))
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        operations = json.loads(base64.b64decode(response["patch"]))
        pod = jsonpatch.apply_patch(pod, operations)
    metadata = pod["metadata"]
    if not metadata.get("name"):
        metadata["name"] = metadata["generateName"] + secrets.token_hex(3)[:5]
    metadata["uid"] = str(uuid.uuid4())
    return pod


def create_pod(cri: CRI, webhook: WebhookEndpoint, manifest: dict[str, Any]) -> StartedPod:
    """Admit `manifest` through the webhook and start it on the node with the annotations it was stored
    with, as the kubelet would."""
    stored = admit(webhook, manifest)
    annotations = stored["metadata"].get("annotations") or {}
    return start_annotated_pod(cri, pod_from_manifest(stored), annotations)
