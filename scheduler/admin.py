"""Django admin for pricing, inventory and stored replays (nodes and replays are read-only: sync and the command write them)."""

from django.contrib import admin

from kiln.admin_site import KilnModelAdmin, admin_actor
from kiln.cluster.backends import get_backend
from kiln.identity.permissions import has_any_role
from scheduler.cluster_reads import visible_node_names
from scheduler.models import InstanceType, Node, ReplayReport, SpotPrice


class SpotPriceInline(admin.TabularInline):
    model = SpotPrice
    extra = 0


class ReadOnlyAdmin(KilnModelAdmin):
    """Shown in the admin, written elsewhere: seed_demo prices, node sync and the replay command
    (platform admins: pricing and replays are the platform's)."""


@admin.register(InstanceType)
class InstanceTypeAdmin(ReadOnlyAdmin):
    list_display = ("name", "family", "vcpu", "memory_gib", "gpus", "gpu_model", "on_demand_hourly")
    list_filter = ("family",)
    inlines = [SpotPriceInline]


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    """The node inventory, narrowed to the nodes the node list shows the viewer
    (kiln.identity.visibility.NODES: shared capacity, and the nodes of environments it sees)."""

    list_display = ("name", "capacity_type", "instance_type", "zone", "source", "synced_at")
    list_filter = ("capacity_type", "source", "zone")
    search_fields = ("name",)
    view_predicate = staticmethod(has_any_role)

    def get_queryset(self, request):
        """The stored nodes the viewer may see."""
        names = visible_node_names(viewer=admin_actor(request), backend=get_backend())
        return super().get_queryset(request).filter(name__in=names)


@admin.register(ReplayReport)
class ReplayReportAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "parts", "seed", "nodes", "placements")
