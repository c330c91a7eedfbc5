"""The machine topology from a sysfs root: `read_topology` reads a tree, `write_tree` writes one."""

from podlevel.sysfs.reader import read_topology
from podlevel.sysfs.writer import write_tree

__all__ = ["read_topology", "write_tree"]
