"""Checkpoints: the CPU and memory managers' state on disk, in the kubelet's own layouts and checksums.

`checksum` and `gotypes` reproduce what the kubelet hashes and how Go reads and writes JSON; `formats` holds
the layouts (CPU V1-V4, memory V1-V3), their content types, the newest-first reader and the writers;
`store` is the only module that touches files (the state directory, atomic writes, corrupt files moved
aside, older layouts migrated in place).
"""
