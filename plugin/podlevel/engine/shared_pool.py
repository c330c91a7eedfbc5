"""The pod shared pool (KEP-5526), for every resource: how a pod budget is split, and the rule that keeps the
pool from being empty.

A pod with pod-level resources gets one bubble of its budget. Equivalent-Guaranteed containers get exclusive
slices of it; every other container runs in what the slices running at the same time leave, the pod shared
pool. `partition` splits the bubble phase by phase (`Pod.phases`).

The empty-shared-pool rule (`empty_shared_pool_violation`) refuses a pod whose pool would be empty while a
container needs it. Phase by phase:
- a standard init container with a slice must fit in what the sidecars beside it leave of the budget;
- a standard init container without one needs the sidecars beside it to leave something;
- in the last phase, when any sidecar or app container has no slice, the slices must leave something.

Both policies apply it: the CPU policy to whole CPUs, the memory policy to each memory resource. A container
is exclusive when it has an amount of any resource and shared when it has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from podlevel.engine.pod import CPU, Container, Pod

Amounts = Mapping[str, int]
"""resource name -> amount: whole CPUs for `cpu`, bytes for memory resources."""

Share = TypeVar("Share")


def partition(
    pod: Pod,
    bubble: Share,
    slice_of: Callable[[Container, Share], Share | None],
    minus: Callable[[Share, Share], Share],
) -> dict[str, Share]:
    """Each container's share of the bubble, in declaration order.

    A container with an exclusive slice gets the slice. It is taken once, in the first phase the container
    runs in, from what the slices before it in that phase leave. `slice_of(container, free)` takes it from
    `free`, or returns None for a container without one.

    A container without a slice gets the pool of the last phase it runs in: the bubble minus every slice of
    that phase (`minus(pool, slice)` removes one). For a standard init container that is its own phase; for
    a sidecar or an app container it is the last phase, the pod's lasting pool.
    """
    slices: dict[str, Share] = {}
    pools: dict[str, Share] = {}
    for phase in pod.phases():
        pool = bubble
        for container in phase.containers:
            if container.name not in slices:
                taken = slice_of(container, pool)
                if taken is None:
                    continue
                slices[container.name] = taken
            pool = minus(pool, slices[container.name])
        pools.update(dict.fromkeys((c.name for c in phase.containers), pool))
    return {c.name: slices[c.name] if c.name in slices else pools[c.name] for c in pod.all_containers}


def empty_shared_pool_violation(
    pod: Pod, budget: Amounts, exclusive: Callable[[Container], Amounts]
) -> str | None:
    """What breaks the rule for `budget`, or None when the pod keeps it.

    `exclusive(container)` is the container's slice per resource; an empty mapping means it runs in the pod
    shared pool. Resources are checked in name order, so the message is the same on every run.
    """
    slices = {container.name: exclusive(container) for container in pod.all_containers}
    totals = sorted(budget.items())
    for phase in pod.phases():
        if phase.init is not None:
            beside = _sum(slices[c.name] for c in phase.sidecars)
            violation = _init_violation(phase.init.name, slices[phase.init.name], totals, beside)
        else:
            shared = [c.name for c in phase.containers if not slices[c.name]]
            taken = _sum(slices[c.name] for c in phase.containers) if shared else {}
            violation = _last_phase_violation(shared, totals, taken)
        if violation is not None:
            return violation
    return None


def _init_violation(name: str, need: Amounts, totals: list[tuple[str, int]], taken: Amounts) -> str | None:
    for resource, total in totals:
        left = total - taken.get(resource, 0)
        if need and need.get(resource, 0) > left:
            return (
                f"init container {name!r} needs {_amount(resource, need[resource], exclusive=True)} but only "
                f"{left} of the pod's {total} are left beside the sidecars before it"
            )
        if not need and left <= 0:
            return (
                f"init container {name!r} needs the pod shared pool but the sidecars before it take "
                f"{total - left} of the pod's {_amount(resource, total)}"
            )
    return None


def _last_phase_violation(shared: list[str], totals: list[tuple[str, int]], taken: Amounts) -> str | None:
    if not shared:
        return None
    for resource, total in totals:
        exclusive = taken.get(resource, 0)
        if exclusive >= total:
            return (
                f"exclusive containers take {exclusive} of the pod's {_amount(resource, total)}, leaving an "
                f"empty pod shared pool for {', '.join(shared)}"
            )
    return None


def _sum(amounts: Iterable[Amounts]) -> dict[str, int]:
    total: dict[str, int] = {}
    for each in amounts:
        for resource, amount in each.items():
            total[resource] = total.get(resource, 0) + amount
    return total


def _amount(resource: str, amount: int, *, exclusive: bool = False) -> str:
    """CPUs count whole, memory resources in bytes."""
    if resource == CPU:
        return f"{amount} exclusive CPUs" if exclusive else f"{amount} CPUs"
    return f"{amount} bytes of {resource}"
