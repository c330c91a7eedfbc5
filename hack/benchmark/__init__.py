"""`hack/bench`: the engine alone, and nri-podlevel at the NRI socket beside the no-op Go plugin on the
upstream stub (usage and keys: `__main__`). By job: the synthetic node and its pods (`node`), the engine part
(`engine_bench`), nri-podlevel as launched (`plugin_process`, through `run`'s own builder), the runtime's end
of a launched plugin (`runtime_peer`) and what it sends (`messages`), the node's cgroups kept as the kubelet
and the runtime keep them (`cgroup_tree`), the NRI runs (`nri_runs`) and the comparison's pure parts
(`stats`)."""
