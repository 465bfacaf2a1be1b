"""Django admin for pricing, inventory and stored replays (nodes and replays are read-only: sync and the command write them)."""

from django.contrib import admin

from scheduler.models import InstanceType, Node, ReplayReport, SpotPrice


class SpotPriceInline(admin.TabularInline):
    model = SpotPrice
    extra = 0


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shown in the admin, written elsewhere: seed_demo prices, node sync and the replay command."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(InstanceType)
class InstanceTypeAdmin(ReadOnlyAdmin):
    list_display = ("name", "family", "vcpu", "memory_gib", "gpus", "gpu_model", "on_demand_hourly")
    list_filter = ("family",)
    inlines = [SpotPriceInline]


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "capacity_type", "instance_type", "zone", "source", "synced_at")
    list_filter = ("capacity_type", "source", "zone")
    search_fields = ("name",)


@admin.register(ReplayReport)
class ReplayReportAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "parts", "seed", "nodes", "placements")
