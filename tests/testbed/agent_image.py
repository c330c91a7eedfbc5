"""The product's image as a cluster gets it: built by hack/image, imported into the test bed's containerd.

hack/image writes an OCI archive (its path the last line it prints, the image id the line before) named as
the manifests name the image (`nri-podlevel:<version>`), so a DaemonSet pod spec rendered from deploy/ finds
it in containerd as a kubelet's would after a pull. `hack/kind-e2e` loads the same archive into kind.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from packaging.utils import canonicalize_name

from testbed.manifests import CHECKOUT

HACK_IMAGE: Final = CHECKOUT / "hack" / "image"
ARCHIVES: Final = CHECKOUT / ".cache" / "image" / "out"
BUILD_TIMEOUT_S: Final = 900


class ImageBuildError(RuntimeError):
    """hack/image failed; the message carries the end of its output."""


@dataclass(frozen=True)
class BuiltImage:
    archive: Path
    image_id: str
    """The image's config digest (`sha256:...`): the same sources give the same id."""
    reference: str
    """What the manifests call it (`nri-podlevel:0.1.0`)."""


IMAGE_REQUIREMENTS: Final = CHECKOUT / "deploy" / "image-requirements.txt"
"""The pins the image's Python packages are installed from."""


def version(checkout: Path = CHECKOUT) -> str:
    return str(tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["version"])


def image_archive(image: str) -> Path:
    """Where hack/image writes the archive of `image` (`nri-podlevel:TAG`)."""
    _, _, tag = image.rpartition(":")
    return ARCHIVES / f"nri-podlevel-{tag}.tar"


def build(checkout: Path = CHECKOUT, *, out: Path | None = None) -> BuiltImage:
    """Run `checkout`'s hack/image (a copy of this checkout may carry another version); the wheels and the
    base come from this checkout's cache."""
    command = [str(checkout / "hack" / "image")] + (["--out", str(out)] if out else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or len(lines) < 2 or not lines[-2].startswith("image id sha256:"):
        raise ImageBuildError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}"
                              f"\n{done.stdout[-1000:]}")
    image_id = lines[-2].removeprefix("image id ")
    return BuiltImage(Path(lines[-1]), image_id, f"nri-podlevel:{version(checkout)}")


def pins() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes), from the file's logical lines (a backslash continues one)."""
    text = re.sub(r"\\\n", " ", IMAGE_REQUIREMENTS.read_text())
    pinned: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split()
        name, _, version = requirement.partition("==")
        assert version, f"{requirement}: not pinned to one version"
        pinned[canonicalize_name(name)] = (version, [o.removeprefix("--hash=sha256:") for o in options])
    return pinned


def labels(archive: Path) -> dict[str, str]:
    """The image config's labels, read from the OCI archive (index -> manifest -> config)."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> Any:
            member = tar.extractfile("blobs/" + digest.replace(":", "/"))
            assert member is not None, digest
            return json.load(member)

        index_file = tar.extractfile("index.json")
        assert index_file is not None
        manifest = blob(json.load(index_file)["manifests"][0]["digest"])
        config = blob(manifest["config"]["digest"])
    return dict(config.get("config", {}).get("Labels") or {})


def prebuilt() -> BuiltImage:
    """The archive hack/image left for this checkout's version, for a guest that cannot build (no network);
    `make vm` builds it first."""
    reference = f"nri-podlevel:{version()}"
    archive = image_archive(reference)
    if not archive.is_file():
        raise ImageBuildError(f"{archive} is missing: build it on the host first (hack/image; make vm does)")
    return BuiltImage(archive, "", reference)


def copy_with_version(destination: Path, new_version: str) -> Path:
    """This checkout's product files (what hack/image reads) with pyproject's version replaced: the image of
    a version bump, for upgrade tests. The copy shares this checkout's virtualenv and image cache."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("hack", "deploy", "plugin", "README.md", ".gitignore"):
        source = CHECKOUT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, destination / name)
    pyproject = (CHECKOUT / "pyproject.toml").read_text()
    old = f'version = "{version()}"'
    if old not in pyproject:
        raise ImageBuildError(f"pyproject.toml has no line {old!r}")
    (destination / "pyproject.toml").write_text(pyproject.replace(old, f'version = "{new_version}"', 1))
    for link, target in ((".venv", CHECKOUT / ".venv"), (".cache", CHECKOUT / ".cache")):
        (destination / link).symlink_to(target)
    subprocess.run(["git", "init", "-q", str(destination)], check=True, timeout=30)
    return destination
