"""deploy/image-requirements.txt, the pins the image is built from: every runtime dependency of the package,
and every dependency of those, pinned to one version that pyproject.toml allows, with a hash."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Final

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testbed.agent_image import pins

CHECKOUT: Final = Path(__file__).resolve().parents[3]


def runtime_dependencies() -> list[Requirement]:
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def test_every_pin_has_a_sha256_hash() -> None:
    for name, (_, hashes) in pins().items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def test_every_runtime_dependency_is_pinned_to_a_version_pyproject_allows() -> None:
    pinned = pins()
    for requirement in runtime_dependencies():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not pinned for the image"
        assert requirement.specifier.contains(pinned[name][0]), (requirement, pinned[name][0])


def test_the_dependencies_of_the_pinned_packages_are_pinned_too() -> None:
    """Read from the installed distributions' metadata (the test environment installs the same names)."""
    pinned = pins()
    for requirement in runtime_dependencies():
        for text in metadata.requires(requirement.name) or []:
            needed = Requirement(text)
            if needed.marker is not None and not needed.marker.evaluate({"extra": ""}):
                continue
            assert canonicalize_name(needed.name) in pinned, f"{requirement.name} needs {needed}, not pinned"


def test_the_build_backend_is_pinned_to_a_version_the_build_system_allows() -> None:
    pinned = {}
    for line in (CHECKOUT / "deploy" / "image-build-constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{line}: not pinned to one version"
            pinned[canonicalize_name(name)] = version
    build = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["build-system"]
    for requirement in map(Requirement, build["requires"]):
        name = canonicalize_name(requirement.name)
        assert name in pinned and requirement.specifier.contains(pinned[name]), requirement
