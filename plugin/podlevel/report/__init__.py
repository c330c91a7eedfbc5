"""What the plugin shows the node: the HTTP endpoint for probes (and metrics and operator views), the
PodResources gRPC service. Every answer is built from the agent's latest `NodeSnapshot`, on the server's own
threads, so no request ever waits on (or delays) an NRI event.
"""
