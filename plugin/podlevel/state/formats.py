"""`cpu_manager_state` and `memory_manager_state`: the kubelet's layouts, read newest first, written stably.

Layouts (JSON; checksums as in `checksum`):

| file   | V | fields                                                      | written by            |
|--------|---|-------------------------------------------------------------|-----------------------|
| CPU    | 1 | policyName, defaultCpuSet, entries{containerID: cpus}, checksum | kubelet <= 1.17   |
| CPU    | 2 | policyName, defaultCpuSet, entries{pod: {container: cpus}}, checksum | <= 1.35, 1.36 |
| CPU    | 3 | V2 + podEntries{pod: {"cpuSet": cpus}}                      | 1.36, pod-level gate on |
| CPU    | 4 | data (JSON of the V3 fields) + dataChecksum + an inline V2   | 1.37                  |
| memory | 1 | policyName, machineState{node: state}, entries{pod: {container: [block]}}, checksum | <= 1.36 |
| memory | 2 | V1 + podEntries{pod: {"memoryBlocks": [block]}}              | 1.36, gate on         |
| memory | 3 | data (JSON of the V2 fields) + dataChecksum + an inline V1   | 1.37                  |

The inline legacy part of the `data` layouts is what keeps a downgrade possible: an older kubelet ignores
`data` and reads the inline fields, verified by their own checksum (pod entries are not there, so it sees
only container entries). Reading follows the kubelet: a file whose `data` or `dataChecksum` is set must
verify by them and is never retried as an older layout; otherwise each older layout is tried in turn on a
fresh decode, a checksum of 0 is accepted unverified where the kubelet accepts it (CPU V1 and V2, memory
V1), and so a V3 CPU or V2 memory file with checksum 0 reads without its pod entries.
`Decoded.checks` says, part by part, what verified and what an older kubelet would do with the file.

This module is the one name readers import; the parts live beside it: what the files hold and how they fail
(`checkpoint_content`), the layouts (`layouts`), the reader with its diagnosis (`reader`), the writer of
any layout (`encoder`; the newest through `newest`, the fast encoder).
"""

from podlevel.state.checkpoint_content import (
    BAD_CHECKSUM,
    BAD_CONTENT,
    EMPTY,
    FUTURE_VERSION,
    NOT_A_FILE,
    NOT_JSON,
    TRUNCATED,
    UNKNOWN_KIND,
    Check,
    Content,
    CorruptCheckpoint,
    CPUCheckpoint,
    Decoded,
    Entries,
    Kind,
    LegacyCPUCheckpoint,
    MemoryCheckpoint,
    MigrationError,
)
from podlevel.state.encoder import encode, newest_encoder
from podlevel.state.layouts import NEWEST, written_by
from podlevel.state.reader import Outcome, Verdict, decode, detect_kind, parse_object

__all__ = [
    "BAD_CHECKSUM",
    "BAD_CONTENT",
    "EMPTY",
    "FUTURE_VERSION",
    "NEWEST",
    "NOT_A_FILE",
    "NOT_JSON",
    "TRUNCATED",
    "UNKNOWN_KIND",
    "CPUCheckpoint",
    "Check",
    "Content",
    "CorruptCheckpoint",
    "Decoded",
    "Entries",
    "Kind",
    "LegacyCPUCheckpoint",
    "MemoryCheckpoint",
    "MigrationError",
    "Outcome",
    "Verdict",
    "decode",
    "detect_kind",
    "encode",
    "newest_encoder",
    "parse_object",
    "written_by",
]
