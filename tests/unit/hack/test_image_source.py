"""hack/image's source label: where an image's commit can be fetched, from the checkout's git remote."""

from __future__ import annotations

import subprocess

import pytest

from testbed.manifests import CHECKOUT


def source_of(origin: str) -> str:
    done = subprocess.run([str(CHECKOUT / "hack" / "image"), "--source-of", origin], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize(("origin", "source"), [
    ("https://github.com/example/nri-podlevel.git", "https://github.com/example/nri-podlevel"),
    ("git@github.com:example/nri-podlevel.git", "https://github.com/example/nri-podlevel"),
    ("ssh://git@gitlab.example.com/team/nri-podlevel", "https://gitlab.example.com/team/nri-podlevel"),
    ("https://ci:secret-token@git.example.com/nri-podlevel", "https://git.example.com/nri-podlevel"),
])
def test_a_remote_becomes_a_web_address_without_credentials(origin: str, source: str) -> None:
    assert source_of(origin) == source


@pytest.mark.parametrize("origin", ["/work/nri-podlevel", "file:///srv/git/nri-podlevel", ""])
def test_a_local_origin_gives_no_source(origin: str) -> None:
    assert source_of(origin) == ""
