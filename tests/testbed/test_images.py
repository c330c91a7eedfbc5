"""Test bed images: archives are deterministic OCI layouts whose index names the manifest containerd will
list, and only ELF files without a program interpreter count as static."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from pathlib import Path

from testbed.images import ImageSpec, is_static_elf, manifest_digest, oci_archive


def _spec(tmp_path: Path) -> ImageSpec:
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\n")
    tool.chmod(0o755)
    return ImageSpec("localhost/x/tool:test", {"/usr/bin/tool": tool}, {"/bin/sh": "../usr/bin/tool"},
                     entrypoint=["/usr/bin/tool"])


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def _blob(files: dict[str, bytes], descriptor: dict[str, str]) -> bytes:
    return files["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]


def test_archive_is_deterministic_and_self_consistent(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    archive = oci_archive(spec)
    assert oci_archive(spec) == archive
    files = _members(archive)
    index = json.loads(files["index.json"])
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "localhost/x/tool:test"
    digest = manifest_digest(archive)
    manifest = json.loads(_blob(files, {"digest": digest}))
    for blob in [manifest["config"], *manifest["layers"]]:
        data = _blob(files, blob)
        assert hashlib.sha256(data).hexdigest() == blob["digest"].removeprefix("sha256:")
        assert len(data) == blob["size"]
    config = json.loads(_blob(files, manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/usr/bin/tool"]
    with tarfile.open(fileobj=io.BytesIO(_blob(files, manifest["layers"][0]))) as layer:
        entries = {m.name: m for m in layer}
    assert entries["usr/bin/tool"].mode == 0o755 and entries["usr/bin/tool"].uid == 0
    assert entries["bin/sh"].issym() and entries["bin/sh"].linkname == "../usr/bin/tool"
    assert entries["tmp"].mode == 0o1777


def _elf(tmp_path: Path, segment_types: list[int]) -> Path:
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 32, 64)
    struct.pack_into("<HH", header, 54, 56, len(segment_types))
    table = b"".join(struct.pack("<I", kind) + bytes(52) for kind in segment_types)
    path = tmp_path / f"elf-{'-'.join(map(str, segment_types))}"
    path.write_bytes(bytes(header) + table)
    return path


def test_static_elf_detection(tmp_path: Path) -> None:
    assert is_static_elf(_elf(tmp_path, [1, 1, 4]))
    assert not is_static_elf(_elf(tmp_path, [6, 3, 1]))
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert not is_static_elf(script)
