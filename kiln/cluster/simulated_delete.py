"""The simulated cluster's deletions: marking an object (and a namespace's contents) deleting,
and the lazy finalizer controller that removes them once their finalizers clear.

Nothing runs in the background: `reconcile` is called by the reads and writes that could see a
deleting object, and removes those whose (simulated) finalizers have cleared by then.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from kiln.cluster.base import AppliedRef
from kiln.cluster.models import SimulatedObject
from kiln.cluster.simulated_failures import STUCK_FINALIZER, finalizer_delay
from kiln.cluster.simulated_rows import ref_lookup
from kiln.cluster.simulated_tenant import TCP, TenantAuditWebhook, tenant_cluster

DELETION_FIELDS = ["deletion_timestamp", "resource_version", "finalizers_clear_at"]


def _start_deletion(obj: SimulatedObject, now) -> None:
    """Set an object deleting as of `now`: its finalizers clear after the simulated delay."""
    obj.deletion_timestamp = now
    obj.resource_version += 1
    stuck = STUCK_FINALIZER in obj.finalizers
    obj.finalizers_clear_at = None if stuck else now + timedelta(seconds=finalizer_delay())


def mark_deleting(objects: QuerySet, ref: AppliedRef, *, audit: TenantAuditWebhook | None) -> bool:
    """Mark the object deleting under its row lock; False if it does not exist.

    A Namespace takes its contents with it: they are marked deleting together, with one
    write, and each deletion is audited (to `audit`) as the namespace controller's would be.
    """
    with transaction.atomic():
        obj = objects.select_for_update().filter(**ref_lookup(ref)).first()
        if obj is None:
            return False
        if obj.deletion_timestamp is None:
            now = timezone.now()
            _start_deletion(obj, now)
            obj.save(update_fields=DELETION_FIELDS)
            if ref.kind == "Namespace" and ref.api_version == "v1":
                children = list(
                    objects.select_for_update()
                    .filter(namespace=ref.name, deletion_timestamp__isnull=True)
                    .order_by("namespace", "name")
                )
                for child in children:
                    _start_deletion(child, now)
                SimulatedObject.objects.bulk_update(children, DELETION_FIELDS)
                for child in children if audit is not None else ():
                    key = (child.api_version, child.kind, child.namespace, child.name)
                    audit.record("delete", [(AppliedRef(*key), 200)])
    return True


def reconcile(objects: QuerySet, due: QuerySet, namespace: str | None = None) -> None:
    """Remove deleting objects whose finalizers have cleared (namespaces wait for contents).

    `namespace` narrows it to the objects of one namespace and the Namespace itself ("":
    the cluster-scoped objects); None is the whole cluster. `due` holds the deleting objects
    whose finalizers have cleared.
    """
    if namespace is not None:
        due = due.filter(Q(namespace=namespace) | Q(kind="Namespace", name=namespace))
    gone = list(
        due.exclude(kind="Namespace", api_version="v1").values_list(
            "pk", "api_version", "kind", "namespace", "name"
        )
    )
    if gone:
        objects.filter(pk__in=[pk for pk, *_ in gone]).delete()
    for _, api_version, kind, obj_namespace, name in gone:
        if (api_version, kind) == TCP:  # its API server's datastore goes with it
            SimulatedObject.objects.filter(cluster=tenant_cluster(obj_namespace, name)).delete()
    for ns in due.filter(kind="Namespace", api_version="v1"):
        if not objects.filter(namespace=ns.name).exists():
            objects.filter(pk=ns.pk).delete()
