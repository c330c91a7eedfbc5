"""The field's own Go binaries the test bed runs (the kubelet, crictl, containerd's newest release and runc),
built from the Go module proxy by `hack/build-go-tools` into a cache outside the checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

from testbed import CHECKOUT

BUILD_GO_TOOLS: Final = CHECKOUT / "hack" / "build-go-tools"
BUILD_TIMEOUT_S: Final = 3600.0


class GoToolError(RuntimeError):
    """A tool could not be built; the message has the build's last lines."""


def build_tools(*tools: str) -> dict[str, Path]:
    """Build (or find already built) the named Go tools; tool -> the directory of its binaries."""
    try:
        done = subprocess.run([str(BUILD_GO_TOOLS), *tools], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise GoToolError(f"building {', '.join(tools)} took longer than {BUILD_TIMEOUT_S:g}s") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise GoToolError(f"hack/build-go-tools {' '.join(tools)} failed (exit {done.returncode}):\n{tail}")
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    return {tool: Path(found[tool]) for tool in tools}
