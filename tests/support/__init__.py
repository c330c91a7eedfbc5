"""What the unit, property and compatibility tests share, so each thing is defined once.

- `builders`: engines and pods the tests build (`guaranteed`, `burstable`, `fast_path`, `new_engine`), and
  `CHECKOUT`/`EXAMPLES` for the files of the repository they read.
- `kubelet_topologies`: the kubelet's own test machines, under their kubelet names.
- `kubelet_cri_cases`: what a kubelet sends over CRI for hand-worked pods.
- `ttrpc_peer`, `nri_runtime_peer`: the other end of a ttrpc connection and a runtime-side NRI peer.
"""
