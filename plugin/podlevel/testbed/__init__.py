"""A private containerd + CRI driver used by tests and the demo.

`containerd.Containerd` runs a containerd (Debian sid 2.x or trixie 1.7) whose every path lives under one
base directory, `images` imports a registry-free pause and busybox image into it, `cri.CRI` drives it the
way a kubelet would, `cgroupfs` reads back what runc wrote, and `plugin_process` runs `nri-podlevel run`
against it as a child process. Nothing here is used by the plugin itself.
"""
