"""nri-podlevel: kubelet pod-level resource managers as a containerd NRI plugin."""
