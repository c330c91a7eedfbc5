"""The PodResources v1 gRPC service: what `podresources_socket` loads, gRPC with it, when the
first client connects."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc

from podlevel._proto.podresources import api_pb2 as pb
from podlevel._proto.podresources import api_pb2_grpc as pb_grpc
from podlevel.agent.snapshot import NodeSnapshot
from podlevel.report.podresources import allocatable_response, find_pod, list_response


class PodResourcesServicer(pb_grpc.PodResourcesListerServicer):
    """`List`, `Get` and `GetAllocatableResources` over whatever snapshot `snapshot()` returns at the call."""

    def __init__(self, snapshot: Callable[[], NodeSnapshot]) -> None:
        self._snapshot = snapshot

    def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        return list_response(self._snapshot())

    def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        found = find_pod(self._snapshot(), request.pod_namespace, request.pod_name)
        if found is None:
            # The kubelet's server_v1.go returns a plain error here, which gRPC sends as Unknown with its
            # text; clients match on both.
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return pb.GetPodResourcesResponse(pod_resources=found)

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        return allocatable_response(self._snapshot())


def grpc_server(snapshot: Callable[[], NodeSnapshot]) -> grpc.Server:
    """A gRPC server with the service added, on two threads of its own; no port yet."""
    server = grpc.server(ThreadPoolExecutor(max_workers=2, thread_name_prefix="podresources"))
    pb_grpc.add_PodResourcesListerServicer_to_server(PodResourcesServicer(snapshot), server)
    return server
