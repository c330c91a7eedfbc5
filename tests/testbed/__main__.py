"""`python -m testbed` (wrapped by hack/containerd-env): the test bed for humans, CI and the demo.

`up` leaves containerd running after the command exits and prints shell assignments (`eval "$(...)"`)
naming its sockets; `down` in a later process finds it again through the PID file under the base
directory. Exit status: 0 on success (for `status`: running), 1 on failure (for `status`: not running).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from testbed.containerd import FLAVOURS, Containerd, ContainerdError, default_base
from testbed.cri import CRIError
from testbed.images import ImageError


def _describe(ctrd: Containerd) -> dict[str, str]:
    return {
        "CONTAINERD_FLAVOUR": ctrd.flavour.name, "CONTAINERD_PID": str(ctrd.pid or ""),
        "CONTAINERD_BASE": str(ctrd.base), "CRI_SOCKET": str(ctrd.cri_socket),
        "NRI_SOCKET": str(ctrd.nri_socket), "NRI_PLUGIN_DIR": str(ctrd.nri_plugin_dir),
        "CGROUP_ROOT": ctrd.cgroup_root, "CONTAINERD_LOG": str(ctrd.log_path),
        "CTR": shlex.join(ctrd.ctr_command()),
    }


def _print_assignments(values: dict[str, str]) -> None:
    for key, value in values.items():
        print(f"{key}={shlex.quote(value)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/containerd-env", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "up", "down", "status"])
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), default="2",
                        help="2: Debian sid containerd 2.x; 1.7: Debian trixie containerd 1.7; 2.4: "
                        "containerd's newest release and runc 1.5, from the Go module proxy (default 2)")
    parser.add_argument("--base", type=Path,
                        help="private directory (default /tmp/nri-podlevel-containerd-FLAVOUR)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="containerd-env: %(message)s")
    ctrd = Containerd(args.flavour, args.base or default_base(args.flavour))
    try:
        if args.command == "fetch":
            ctrd.fetch()
            if ctrd.flavour.built:
                print(f"containerd {ctrd.flavour.name}: {ctrd.bin_dir}, runc {ctrd.runc}")
            else:
                print((ctrd.cache / "versions.txt").read_text().strip())
        elif args.command == "up":
            if not ctrd.running:
                try:
                    ctrd.start()
                except BaseException:
                    ctrd.stop()
                    raise
            _print_assignments(_describe(ctrd))
        elif args.command == "down":
            ctrd.stop()
        else:
            if not ctrd.running:
                print(f"containerd {ctrd.flavour.name} at {ctrd.base}: not running")
                return 1
            _print_assignments(_describe(ctrd))
            with ctrd.cri() as cri:
                print(f"PODS={len(cri.list_pods())}")
                print(f"CONTAINERS={len(cri.list_containers())}")
    except (ContainerdError, CRIError, ImageError) as exc:
        print(f"containerd-env {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
