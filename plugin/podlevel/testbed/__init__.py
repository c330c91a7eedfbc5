"""A private containerd + CRI driver used by tests and the demo.

`containerd.Containerd` runs a containerd (Debian sid 2.x or trixie 1.7) whose every path lives under one
base directory, `images` imports a registry-free pause and busybox image into it, `cri.CRI` drives it the
way a kubelet would, and `cgroupfs` reads back what runc wrote. Nothing here is used by the plugin itself.
"""
