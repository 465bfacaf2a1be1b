"""Tenant control planes' side of the portal: reserving a datastore pool under its hard cap.

A pool is reserved when the request is submitted (the plan names it, and the approver sees it),
under a lock over every live environment's reservation, so concurrent requests respect the caps.
A request that would exceed every pool is DENIED with the pools' fill in its reason, never
placed past a cap; a pool spec that does not parse is a 503 that names the entry, before
anything is written.
"""

from __future__ import annotations

from django.db import transaction

from kiln.errors import Unavailable
from portal import compose as c
from portal import conf
from portal.lifecycle import LIVE
from portal.models import Environment


class DatastorePoolsMisconfigured(Unavailable):
    """KILN_DATASTORE_POOLS does not parse: no tenant control plane can be placed."""

    code = "datastore_pools_invalid"


def datastore_pools() -> list[c.DatastorePool]:
    """The configured pools, or DatastorePoolsMisconfigured with the parser's reason."""
    try:
        return conf.datastore_pools()
    except c.DatastorePoolSpecInvalid as exc:
        raise DatastorePoolsMisconfigured(
            f"KILN_DATASTORE_POOLS does not parse: {exc}", extra={"setting": "KILN_DATASTORE_POOLS"}
        ) from None


def datastore_reserve(*, environment: Environment) -> str:
    """Reserve the datastore pool for an environment (idempotent: an existing reservation stays).

    Raises PoolsExhausted when every pool is at its cap, DatastorePoolsMisconfigured when the
    pool spec does not parse.
    """
    pools = datastore_pools()
    with transaction.atomic():
        locked = list(
            Environment.objects.select_for_update()
            .filter(status__in=[s.value for s in LIVE])
            .exclude(datastore_pool="")
            .values_list("pk", "datastore_pool")
        )
        current = Environment.objects.select_for_update().get(pk=environment.pk)
        if current.datastore_pool:
            environment.datastore_pool = current.datastore_pool
            return current.datastore_pool
        counts: dict[str, int] = {}
        for pk, pool in locked:
            if pk != environment.pk:
                counts[pool] = counts.get(pool, 0) + 1
        pool = c.choose_datastore(pools, counts)
        Environment.objects.filter(pk=environment.pk).update(datastore_pool=pool.name)
    environment.datastore_pool = pool.name
    return pool.name
