"""What the plugin shows the node: the HTTP endpoint for probes (and metrics and operator views), the
PodResources gRPC service. Every answer is built from the agent's latest `NodeSnapshot`, on the server's own
threads, so no request ever waits on (or delays) an NRI event.
"""

from pathlib import Path
from typing import Final

DEFAULT_PODRESOURCES_SOCKET: Final = Path("/var/lib/nri-podlevel/pod-resources.sock")
"""Where `nri-podlevel run` serves PodResources unless told otherwise (here, so that reading the default does
not load gRPC)."""
DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1:9808"
"""The probes and `/metrics` (the DaemonSet's probes and PodMonitor name its port)."""
DEFAULT_DEBUG_ADDRESS: Final = "127.0.0.1:9809"
"""The operator views name every pod and its CPUs: loopback by default, so a pod network never carries them
(`kubectl exec` into the agent reaches them; `show`, `check`, `explain` and `simulate --node` ask there)."""
