"""The operator documents' types: `/debug/node` (`NodeDocument`, read by `show`, `check` and `simulate
--node`) and `/debug/explain` (`ExplainDocument`, read by `explain`). One schema for the producer
(`report.views`) and its readers, so a renamed or retyped field fails type checking on both sides, not at an
operator's terminal. CPU and NUMA-node sets are Linux list strings (`0-3,8`); sizes are bytes, CPU amounts
millicores.
"""

from __future__ import annotations

from typing import TypedDict


class EngineDocument(TypedDict):
    scope: str
    topology_policy: str
    cpu_policy: str
    memory_policy: str
    reserved_cpus: str
    reserved_memory: dict[str, dict[str, int]]
    """NUMA node -> resource name -> bytes."""
    cpu_options: dict[str, str]
    topology_options: dict[str, str]


class TopologyDocument(TypedDict):
    cpus: str
    numa_nodes: dict[str, str]
    """NUMA node -> its CPUs."""


class NumaCpus(TypedDict):
    all: str
    reserved: str | None
    bubbles: str
    exclusive: str | None
    """None: unknown (read from the checkpoints, which cannot tell)."""
    free: str


class NumaMemory(TypedDict):
    total: int
    reserved: int
    allocatable: int
    bubbles: int
    exclusive: int
    free: int


class NumaDocument(TypedDict):
    node: int
    cpus: NumaCpus
    memory: dict[str, NumaMemory]
    """Resource name (`memory`, `hugepages-2Mi`) -> bytes."""


class BubbleDocument(TypedDict):
    cpus: str | None
    mems: str | None


class PodCgroupDocument(TypedDict):
    cpus: str | None
    """None: the pod has no bubble; its cgroup stays as wide as its parent's."""
    mems: str
    unlimited_quota: bool
    cpu_period_us: int
    failure: str | None


class ContainerDocument(TypedDict):
    id: str
    name: str
    assignment: str
    cpus: str
    mems: str
    cpu_quota_us: int | None
    """None leaves the runtime's quota alone; -1 is no limit."""
    cpu_period_us: int
    cgroups_path: str | None


class PodDocument(TypedDict):
    namespace: str
    name: str
    uid: str
    sandbox_id: str
    managed: bool
    status: str
    """`admitted`, `pending`, `refused`, `kept-out` or `unmanaged`."""
    refusal: str | None
    shape: str | None
    """The pod-shape annotation of an admitted pod (what `simulate --node` rebuilds it from)."""
    cgroup_parent: str
    bubble: BubbleDocument | None
    pod_cgroup: PodCgroupDocument | None
    containers: list[ContainerDocument]


class CheckpointDocument(TypedDict):
    cpu: str
    """`cpu_manager_state`, the file's text as the plugin would write it now (read it as the file is read)."""
    memory: str


class PathsDocument(TypedDict):
    """Where the plugin reads and writes on its node, as its own file system names them: the operator
    commands run beside it (`kubectl exec` into its container) read the same files."""

    cgroup_root: str | None
    """Its `--cgroup-root` (null: it writes no cgroup)."""


class NodeDocument(TypedDict):
    generation: int
    synchronized: bool
    checkpoint_error: str | None
    engine: EngineDocument
    topology: TopologyDocument
    node_shared_pool: str
    numa_nodes: list[NumaDocument]
    pods: list[PodDocument]
    checkpoint: CheckpointDocument
    paths: PathsDocument


# -- /debug/explain ---------------------------------------------------------------------------------------


class PodRefDocument(TypedDict):
    namespace: str
    name: str
    uid: str


class FreeDocument(TypedDict):
    """What a NUMA node had free before the decision."""

    node: int
    cpus: str
    memory: dict[str, int]
    """Resource name -> bytes."""


class HintDocument(TypedDict):
    numa_nodes: list[int] | None
    """None: any NUMA node will do."""
    preferred: bool


ProviderDocument = dict[str, list[HintDocument] | None]
"""Resource name -> the provider's hints for it: None is "no preference", an empty list "cannot be placed"."""


class AlignmentDocument(TypedDict):
    """One merge of the topology manager: for the pod (pod scope) or a container."""

    container: str | None
    requested: dict[str, int]
    """Resource name -> millicores (cpu) or bytes."""
    hints: dict[str, ProviderDocument | None]
    """Provider (`cpu`: the CPU manager, `memory`: the memory manager) -> its hints; None: it gave none."""
    merged: HintDocument
    admitted: bool


class ErrorDocument(TypedDict):
    type: str
    """The kubelet's admission error type (`TopologyAffinityError`, ...)."""
    message: str


class DecidedContainerDocument(TypedDict):
    name: str
    kind: str
    assignment: str
    cpus: str
    mems: str
    cpu_quota_us: int | None
    cpu_period_us: int


class DecisionDocument(TypedDict):
    bubble: BubbleDocument | None
    containers: list[DecidedContainerDocument]


class ExplainDocument(TypedDict):
    """Why a pod got what it got: admission replayed on the node state it was decided on."""

    pod: PodRefDocument
    path: str
    """`pod-level resources`, `pod scope` or `container scope`."""
    scope: str
    topology_policy: str
    within: str | None
    """The CPUs admission was confined to (a pod taken back after a restart); None: the whole node."""
    free: list[FreeDocument]
    alignments: list[AlignmentDocument]
    admitted: bool
    error: ErrorDocument | None
    decision: DecisionDocument | None
    refusal: str | None
    """What the runtime was last answered for this pod."""


class ExplainMissingDocument(TypedDict):
    """The 404 answer: no decision about the pod is kept."""

    error: str
    refusal: str | None
