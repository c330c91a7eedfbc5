"""The DaemonSet's probes, on the plugin's HTTP endpoint (`--metrics-address`, default 127.0.0.1:9808).

- `/healthz`: 200 while the process serves requests (the liveness probe);
- `/readyz`: 200 once the plugin is registered with the runtime and synchronized, else 503 saying which
  (the readiness probe).
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from podlevel.httpd import Query, Reply, Route


def probes(ready: Callable[[], str | None]) -> dict[str, Route]:
    """`/healthz` and `/readyz`; `ready()` returns None when ready, else what is still missing."""

    def healthz(_: Query) -> Reply:
        return Reply(HTTPStatus.OK, b"ok\n")

    def readyz(_: Query) -> Reply:
        missing = ready()
        if missing is None:
            return Reply(HTTPStatus.OK, b"ok\n")
        return Reply(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {missing}\n".encode())

    return {"/healthz": healthz, "/readyz": readyz}
