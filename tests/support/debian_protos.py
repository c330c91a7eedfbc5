"""Upstream .proto files as Debian packages them (the Go -dev packages carry the sources), fetched by
hack/fetch-debs into .cache/debian and made compilable by protoc without Go's gogoproto extensions."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Final

from support.builders import CHECKOUT

CACHE: Final = CHECKOUT / ".cache" / "debian"
GOCODE: Final = Path("usr/share/gocode/src")
NRI: Final = "golang-github-containerd-nri-dev/sid"
CRI: Final = "golang-github-kubernetes-cri-api-dev/sid"
KUBELET: Final = "golang-github-kubernetes-kubelet-dev/sid"
NRI_PROTO: Final = GOCODE / "github.com/containerd/nri/pkg/api/api.proto"
CRI_PROTO: Final = GOCODE / "k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
PODRESOURCES_PROTO: Final = GOCODE / "k8s.io/kubelet/pkg/apis/podresources/v1/api.proto"
FETCH_TIMEOUT_S: Final = 840


class FetchFailed(RuntimeError):
    """hack/fetch-debs could not provide the packages."""


def fetch(*packages: str) -> Path:
    """Download (or reuse) the packages and return the root they are unpacked into."""
    run = subprocess.run([str(CHECKOUT / "hack" / "fetch-debs"), "--cache", str(CACHE), *packages],
                         capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False)
    if run.returncode != 0:
        given = " ".join(packages)
        raise FetchFailed(f"hack/fetch-debs {given} exited {run.returncode}: {run.stderr.strip()}")
    return CACHE / "root"


def versions() -> str:
    """What was fetched, for messages: "package version suite; ..."."""
    listed = CACHE / "versions.txt"
    return listed.read_text().strip().replace("\n", "; ") if listed.exists() else "unknown versions"


def without_gogoproto(source: Path) -> str:
    """The .proto text without the Go-only gogoproto import and options, which change no wire format."""
    text = source.read_text()
    text = re.sub(r'^import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n', "", text, flags=re.M)
    text = re.sub(r"^option \(gogoproto\.[^;]*;\n", "", text, flags=re.M)
    text = re.sub(r"\s*\[\(gogoproto\.[^]]*\]", "", text)
    if "gogoproto" in text:
        raise ValueError(f"{source}: gogoproto left after stripping")
    return text
