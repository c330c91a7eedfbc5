"""The test bed: a private containerd + CRI driver for the tests and the demo, and the guest VM for tests/vm.

`containerd.Containerd` runs a containerd (Debian sid 2.x or trixie 1.7) whose every path lives under one
base directory, `images` imports a registry-free pause and busybox image into it, `cri.CRI` drives it the
way a kubelet would, `cgroupfs` reads back what runc wrote, and `plugin_process` runs `nri-podlevel run`
against it as a child process. `vm` (hack/vm-run) boots the throw-away QEMU guest; it needs only the
standard library. Nothing here is shipped: it runs from a checkout (its `.cache/` and `hack/` scripts).
"""

from pathlib import Path
from typing import Final

# The repository the test bed runs from: its .cache/ holds the downloads, its hack/ the scripts it calls.
CHECKOUT: Final = Path(__file__).resolve().parents[2]
