"""What the unit, property and compatibility tests share, so each thing is defined once.

- `builders`: the one set of builders for resources (`resources`, `guaranteed`, `burstable`), containers
  (`app`, `sidecar`, `init`), pods (`pod`, `fast_path`, `example`) and engines (`new_engine` on `SMALL`), the
  units `MI`/`GI`, and `CHECKOUT`/`EXAMPLES` for the files of the repository they read.
- `kubelet_topologies`: the kubelet's own test machines, under their kubelet names.
- `kubelet_cri_cases`: what a kubelet sends over CRI for hand-worked pods.
- `ttrpc_peer`, `nri_runtime_peer`: the other end of a ttrpc connection and a runtime-side NRI peer.
"""
