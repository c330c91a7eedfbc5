"""The node engine: the kubelet's topology, CPU and memory managers, with KEP-5526 pod-level resources.

Pure and immutable: no I/O, and every operation returns a new state or raises, so a refused pod leaves the
state as it was. `run` (through the agent) and `simulate` drive the same `manager.Engine`.

Where each concept lives:
- Admission paths (pod-level, classic pod scope, container scope), removal, and each container's decision
  (CPUs, NUMA nodes, CFS quota): `manager.Engine`.
- The pod: containers and their kinds (init, sidecar, app), QoS class, requests in millicores and bytes:
  `pod`.
- The phase walk (KEP-753): each standard init container runs beside the sidecars declared before it, then
  all sidecars and app containers run together: `pod.Pod.phases`, which the aggregate request, both
  policies and the pod shared pool's quota use.
- The CPU sets SHARED, RESERVED, ASSIGNABLE and EXCLUSIVE, and pod bubbles on the CPU side:
  `cpu_policy.StaticCPUPolicy` and `cpu_policy.CPUState`.
- Which free CPUs fill a request (whole NUMA nodes, sockets, uncore caches, cores, then threads):
  `cpu_assignment`.
- Memory and hugepages per NUMA node, and a pod budget charged once: `memory_policy.StaticMemoryPolicy`.
- Restore: a pod its checkpoints recorded taken back onto its recorded CPUs and memory blocks when today's
  settings still allow them, and why its memory moved when they do not: `restore.restore` (where each pod
  then goes is the agent's plan, `agent.resync`).
- The policies that do nothing (CPU `none`, memory `None`): `policy_none`.
- The bubble's split into exclusive slices and the pod shared pool, and the empty-shared-pool rule:
  `shared_pool.partition` and `shared_pool.empty_shared_pool_violation`.
- Hints, their merge into one NUMA affinity, and the topology policies and scopes: `topology_manager`.
  The merge's non-preferred candidates, found on the lattice of NUMA node subsets: `hint_lattice`.
- Why a pod got what it got or was refused (admission replayed with its merges traced): `explain`.
- NUMA masks and the kubelet's orders over them: `bitmask`.
- The per-pod tables of a state (admitted pods, CPU and memory entries), which a new state shares with the
  one it was made from instead of copying them: `shared_map`.
- CFS conversions (CPU request to `cpu.shares`, limit to quota) and the unlimited quota: `cfs`.
- The machine (CPUs, cores, sockets, NUMA nodes, distances) and synthetic machines: `topology`.
- Value syntax: CPU lists (`0-3,8`) in `cpuset`, quantities (`500m`, `4Gi`) in `quantity`, option values
  (`true`, `8`) in `option_values`.
- Refusals typed as the kubelet types them (TopologyAffinityError, SMTAlignmentError,
  EmptyPodSharedPoolError, UnexpectedAdmissionError) and bad input (`InputError`): `errors`.
"""
