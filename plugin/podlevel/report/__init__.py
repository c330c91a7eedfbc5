"""What the plugin shows the node: the HTTP endpoint for probes (and metrics and operator views), the
PodResources gRPC service. Every answer is built from the agent's latest `NodeSnapshot`, on the server's own
threads, so no request ever waits on (or delays) an NRI event.
"""

from pathlib import Path
from typing import Final

DEFAULT_PODRESOURCES_SOCKET: Final = Path("/var/lib/nri-podlevel/pod-resources.sock")
"""Where `nri-podlevel run` serves PodResources unless told otherwise (here, so that reading the default does
not load gRPC)."""
