"""Plugin identity rules and the launch environment."""

from __future__ import annotations

import pytest

from podlevel.nri.identity import InvalidIdentity, PluginIdentity, launched_socket_fd, resolve_identity


@pytest.mark.parametrize("name", ["podlevel", "pod-level_1.2+x", "A"])
@pytest.mark.parametrize("index", ["00", "10", "99"])
def test_valid_identities(name: str, index: str) -> None:
    identity = PluginIdentity(name, index)
    assert str(identity) == f"{index}-{name}"


@pytest.mark.parametrize(
    ("name", "index", "message"),
    [
        pytest.param("", "10", "plugin name must not be empty", id="empty-name"),
        pytest.param(
            "pod level", "10", "'pod level' may only contain characters from [A-Za-z0-9_.+-]", id="space"
        ),
        pytest.param("pod/level", "10", "'pod/level' may only", id="slash"),
        pytest.param("podlevel\n", "10", "may only", id="trailing-newline"),
        pytest.param("podlevel", "1", "plugin index '1' must be exactly two digits (00-99)", id="one-digit"),
        pytest.param("podlevel", "100", "'100' must be exactly two digits", id="three-digits"),
        pytest.param("podlevel", "1a", "'1a' must be exactly two digits", id="letter"),
        pytest.param("podlevel", "\u0661\u0662", "must be exactly two digits", id="non-ascii-digits"),
        pytest.param("podlevel", "10\n", "must be exactly two digits", id="index-newline"),
    ],
)
def test_invalid_identities_name_the_rule(name: str, index: str, message: str) -> None:
    with pytest.raises(InvalidIdentity) as info:
        PluginIdentity(name, index)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("name", "index", "environ", "argv0", "expected"),
    [
        pytest.param(
            "given",
            "20",
            {"NRI_PLUGIN_NAME": "env", "NRI_PLUGIN_IDX": "30"},
            "40-file",
            ("given", "20"),
            id="explicit",
        ),
        pytest.param(
            None, None, {"NRI_PLUGIN_NAME": "env", "NRI_PLUGIN_IDX": "30"}, "40-file", ("env", "30"), id="env"
        ),
        pytest.param(None, None, {}, "/opt/nri/plugins/40-file", ("file", "40"), id="argv0"),
        pytest.param("given", None, {}, "/opt/nri/plugins/40-file-x", ("given", "40"), id="mixed"),
        pytest.param(None, "15", {"NRI_PLUGIN_NAME": ""}, "40-a-b", ("a-b", "15"), id="empty-env-ignored"),
    ],
)
def test_resolution_order(
    name: str | None, index: str | None, environ: dict[str, str], argv0: str, expected: tuple[str, str]
) -> None:
    identity = resolve_identity(name, index, environ, argv0)
    assert (identity.name, identity.index) == expected


def test_unresolvable_identity_says_what_is_missing() -> None:
    with pytest.raises(
        InvalidIdentity, match=r"plugin name and index not given.*'nri-podlevel' is not of the form NN-name"
    ):
        resolve_identity(None, None, {}, "/usr/bin/nri-podlevel")
    with pytest.raises(InvalidIdentity, match="plugin index not given"):
        resolve_identity("podlevel", None, {}, "/usr/bin/nri-podlevel")


def test_resolved_identity_is_still_validated() -> None:
    with pytest.raises(InvalidIdentity, match="'bad name' may only"):
        resolve_identity(None, None, {}, "/opt/nri/plugins/10-bad name")


def test_launch_socket_fd() -> None:
    assert launched_socket_fd({}) is None
    assert launched_socket_fd({"NRI_PLUGIN_SOCKET": ""}) is None
    assert launched_socket_fd({"NRI_PLUGIN_SOCKET": "3"}) == 3
    with pytest.raises(InvalidIdentity, match="NRI_PLUGIN_SOCKET='three' is not a file descriptor number"):
        launched_socket_fd({"NRI_PLUGIN_SOCKET": "three"})
