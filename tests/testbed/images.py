"""Registry-free images for the test bed: a static pause binary and the host's static busybox, each packed
as a single-layer OCI image archive and imported into containerd's `k8s.io` namespace.

Archives are byte-for-byte deterministic (fixed mtimes, owners and order), so an image's digest depends only
on its inputs: rebuilding rewrites nothing and importing again is skipped when containerd already holds the
same digest under the same name. Only the standard library and gcc are used; no registry is ever contacted.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import struct
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

PAUSE_IMAGE: Final = "localhost/nri-podlevel/pause:test"
BUSYBOX_IMAGE: Final = "localhost/nri-podlevel/busybox:test"
PAUSE_SOURCE: Final = Path(__file__).with_name("pause.c")
HOST_BUSYBOX: Final = Path("/bin/busybox")
PATH_ENV: Final = "PATH=/bin:/usr/bin:/sbin:/usr/sbin"
# Directories every container expects to exist before runc mounts over them; tmp is world-writable+sticky.
ROOTFS_DIRS: Final = {"bin": 0o755, "dev": 0o755, "etc": 0o755, "proc": 0o555, "run": 0o755, "sys": 0o555,
                      "tmp": 0o1777}
ETC_FILES: Final = {"etc/passwd": b"root:x:0:0:root:/:/bin/sh\n", "etc/group": b"root:x:0:\n"}
_OCI_ARCH: Final = {"x86_64": "amd64", "aarch64": "arm64"}
_PT_INTERP: Final = 3


class ImageError(RuntimeError):
    """An image could not be built or imported."""


@dataclass(frozen=True)
class ImageSpec:
    """What goes into one image: files (path in image -> host file), symlinks (path -> target), config."""

    name: str
    files: Mapping[str, Path]
    symlinks: Mapping[str, str] = field(default_factory=dict)
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()


def _tar_entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _layer(spec: ImageSpec) -> bytes:
    dirs = dict(ROOTFS_DIRS)
    for path in [*spec.files, *spec.symlinks]:
        parent = os.path.dirname(path.lstrip("/"))
        while parent:
            dirs.setdefault(parent, 0o755)
            parent = os.path.dirname(parent)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(dirs):
            tar.addfile(_tar_entry(name, tarfile.DIRTYPE, dirs[name]))
        for name, data in sorted(ETC_FILES.items()):
            tar.addfile(_tar_entry(name, size=len(data)), io.BytesIO(data))
        for dest, src in sorted(spec.files.items()):
            mode = src.stat().st_mode & 0o7777
            with src.open("rb") as content:
                tar.addfile(_tar_entry(dest.lstrip("/"), mode=mode, size=src.stat().st_size), content)
        for link, target in sorted(spec.symlinks.items()):
            entry = _tar_entry(link.lstrip("/"), tarfile.SYMTYPE, 0o777)
            entry.linkname = target
            tar.addfile(entry)
    return buf.getvalue()


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def oci_archive(spec: ImageSpec) -> bytes:
    """The OCI image layout tarball for `spec`, as `ctr images import` reads it."""
    arch = _OCI_ARCH.get(platform.machine(), platform.machine())
    layer = _layer(spec)
    config: dict[str, object] = {"Env": [PATH_ENV], "WorkingDir": "/"}
    if spec.entrypoint:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config["Cmd"] = list(spec.cmd)
    image_config = {
        "architecture": arch, "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    blobs: dict[str, bytes] = {}

    def descriptor(data: bytes, media_type: str) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}

    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor(_json(image_config), "application/vnd.oci.image.config.v1+json"),
        "layers": [descriptor(layer, "application/vnd.oci.image.layer.v1.tar")],
    }
    manifest_descriptor = descriptor(_json(manifest), "application/vnd.oci.image.manifest.v1+json")
    manifest_descriptor["annotations"] = {"io.containerd.image.name": spec.name,
                                          "org.opencontainers.image.ref.name": spec.name.rsplit(":", 1)[-1]}
    manifest_descriptor["platform"] = {"architecture": arch, "os": "linux"}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_descriptor]}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tar_entry("blobs", tarfile.DIRTYPE, 0o755))
        tar.addfile(_tar_entry("blobs/sha256", tarfile.DIRTYPE, 0o755))
        for digest, data in sorted(blobs.items()):
            tar.addfile(_tar_entry(f"blobs/sha256/{digest}", size=len(data)), io.BytesIO(data))
        layout = _json({"imageLayoutVersion": "1.0.0"})
        for name, data in (("oci-layout", layout), ("index.json", _json(index))):
            tar.addfile(_tar_entry(name, size=len(data)), io.BytesIO(data))
    return out.getvalue()


def manifest_digest(archive: bytes) -> str:
    """The `sha256:` digest of the manifest an archive names: what containerd lists for the image."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.loads(member.read())
    return str(index["manifests"][0]["digest"])


def is_static_elf(path: Path) -> bool:
    """True for an ELF executable without a program interpreter, i.e. one that runs in an empty rootfs."""
    with path.open("rb") as elf:
        header = elf.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            return False
        order = "<" if header[5] == 1 else ">"
        phoff, = struct.unpack_from(order + "Q", header, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 54)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
    return all(struct.unpack_from(order + "I", table, i * phentsize)[0] != _PT_INTERP for i in range(phnum))


def build_pause(out_dir: Path) -> Path:
    """Compile pause.c statically into out_dir (only when the source changed since the last build)."""
    binary = out_dir / "pause"
    if binary.exists() and binary.stat().st_mtime >= PAUSE_SOURCE.stat().st_mtime:
        return binary
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ImageError("building the pause image needs gcc and a static libc (hack/setup: gcc libc6-dev)")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f".pause.{os.getpid()}")
    done = subprocess.run([gcc, "-static", "-Os", "-s", "-o", str(tmp), str(PAUSE_SOURCE)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageError(f"gcc -static {PAUSE_SOURCE} failed (is libc6-dev installed?):\n{done.stderr}")
    tmp.replace(binary)
    return binary


def busybox_applets(busybox: Path) -> list[str]:
    """Every applet the busybox binary provides, so the image has the whole toolbox under /bin."""
    listing = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted({name for name in listing.split() if name != "busybox"})


def image_specs(work_dir: Path, busybox: Path = HOST_BUSYBOX) -> list[ImageSpec]:
    """The sandbox (pause) and workload (busybox, default command a long sleep) images."""
    if not busybox.exists() or not is_static_elf(busybox):
        raise ImageError(f"{busybox} must be a statically linked busybox (Debian: busybox-static)")
    pause = build_pause(work_dir)
    return [
        ImageSpec(PAUSE_IMAGE, {"/pause": pause}, entrypoint=["/pause"]),
        ImageSpec(BUSYBOX_IMAGE, {"/bin/busybox": busybox},
                  symlinks={f"/bin/{applet}": "busybox" for applet in busybox_applets(busybox)},
                  cmd=["/bin/sh", "-c", "sleep 3600"]),
    ]


def write_archives(work_dir: Path, specs: Sequence[ImageSpec]) -> dict[str, tuple[Path, str]]:
    """Write each image's archive under work_dir (rewritten only when its content changed).

    Returns image name -> (archive path, manifest digest).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    result = {}
    for spec in specs:
        archive = oci_archive(spec)
        path = work_dir / (spec.name.rsplit("/", 1)[-1].replace(":", "-") + ".oci.tar")
        if not path.exists() or path.read_bytes() != archive:
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_bytes(archive)
            tmp.replace(path)
        result[spec.name] = (path, manifest_digest(archive))
    return result


def imported_digests(ctr: Sequence[str]) -> dict[str, str]:
    """Image name -> digest as containerd's k8s.io namespace lists them (`ctr` is the command prefix)."""
    listing = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True, check=False)
    if listing.returncode != 0:
        raise ImageError(f"ctr images ls failed: {listing.stderr.strip()}")
    rows = [line.split() for line in listing.stdout.splitlines()[1:]]
    return {row[0]: row[2] for row in rows if len(row) >= 3}


def import_images(ctr: Sequence[str], work_dir: Path, snapshotter: str,
                  busybox: Path = HOST_BUSYBOX) -> list[str]:
    """Build the test bed images and import those containerd does not already hold. Returns their names.

    `ctr` is the command prefix with address and namespace (`ctr -a SOCK -n k8s.io`). `--local` makes
    containerd 2.x import in the client rather than through the transfer service, whose unpacker ignores
    the snapshotter chosen here.
    """
    archives = write_archives(work_dir, image_specs(work_dir, busybox))
    present = imported_digests(ctr)
    for name, (path, digest) in archives.items():
        if present.get(name) == digest:
            continue
        done = subprocess.run([*ctr, "images", "import", "--local", "--snapshotter", snapshotter, str(path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ImageError(f"ctr images import {path} failed: {done.stderr.strip()}")
    listed = imported_digests(ctr)
    missing = {name for name, (_, digest) in archives.items() if listed.get(name) != digest}
    if missing:
        raise ImageError(f"images not listed by containerd after import: {sorted(missing)}")
    return sorted(archives)
