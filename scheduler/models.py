"""Pricing (instance types, spot prices) and inventory (nodes) shared by the extender and the portal."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from kiln.cluster import nodes

# The node labels the inventory reads, as the cluster interface names them (kiln.cluster.nodes).
CAPACITY_TYPE_LABEL = nodes.L_CAPACITY_TYPE
INSTANCE_TYPE_LABEL = nodes.L_INSTANCE_TYPE
ZONE_LABEL = nodes.L_ZONE
NODEPOOL_LABEL = nodes.L_NODEPOOL
ENVIRONMENT_LABEL = nodes.L_ENVIRONMENT


class CapacityType(models.TextChoices):
    """Values of `karpenter.sh/capacity-type`; UNKNOWN when the label is missing or unexpected."""

    ON_DEMAND = "on-demand", "On-demand"
    SPOT = "spot", "Spot"
    RESERVED = "reserved", "Reserved"
    UNKNOWN = "unknown", "Unknown"


class InterruptionBucket(models.IntegerChoices):
    """Spot interruption frequency per month (the Spot Instance Advisor bands)."""

    UNDER_5 = 0, "<5%"
    FROM_5_TO_10 = 1, "5-10%"
    FROM_10_TO_15 = 2, "10-15%"
    FROM_15_TO_20 = 3, "15-20%"
    OVER_20 = 4, ">20%"


class NodeSource(models.TextChoices):
    """Where a node row was synced from."""

    CLUSTER = "cluster", "The configured cluster"
    KUBERNETES = "kubernetes", "Kubernetes watch (before cluster sync)"
    SIMULATED = "simulated", "Simulated node list (before cluster sync)"


class InstanceType(models.Model):
    """A machine type with its shape and on-demand list price (USD per hour)."""

    name = models.CharField(max_length=64, unique=True)
    family = models.CharField(max_length=32)
    vcpu = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    memory_gib = models.DecimalField(max_digits=8, decimal_places=2)
    gpus = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=64, blank=True)
    on_demand_hourly = models.DecimalField(max_digits=10, decimal_places=4)

    class Meta:
        ordering = ["family", "vcpu", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(on_demand_hourly__gt=Decimal("0")),
                name="instancetype_price_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(gpus=0) | ~models.Q(gpu_model=""),
                name="instancetype_gpu_has_model",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class SpotPrice(models.Model):
    """The current spot price (USD per hour) and interruption bucket of a type in one zone."""

    instance_type = models.ForeignKey(
        InstanceType, on_delete=models.CASCADE, related_name="spot_prices"
    )
    zone = models.CharField(max_length=64)
    hourly = models.DecimalField(max_digits=10, decimal_places=4)
    interruption_bucket = models.PositiveSmallIntegerField(choices=InterruptionBucket.choices)
    observed_at = models.DateTimeField()

    class Meta:
        ordering = ["instance_type__name", "zone"]
        constraints = [
            models.UniqueConstraint(
                fields=["instance_type", "zone"], name="spotprice_type_zone_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(hourly__gt=Decimal("0")), name="spotprice_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type.name}@{self.zone}"


class Node(models.Model):
    """A cluster node as last synced: labels, capacity type, shape, allocatable and requested."""

    name = models.CharField(max_length=253, unique=True)
    labels = models.JSONField(default=dict, blank=True)
    capacity_type = models.CharField(
        max_length=16, choices=CapacityType.choices, default=CapacityType.UNKNOWN
    )
    instance_type = models.CharField(max_length=64, blank=True)
    zone = models.CharField(max_length=64, blank=True)
    allocatable_cpu_millis = models.BigIntegerField(default=0)
    allocatable_memory_bytes = models.BigIntegerField(default=0)
    allocatable_gpus = models.IntegerField(default=0)
    requested_cpu_millis = models.BigIntegerField(default=0)
    requested_memory_bytes = models.BigIntegerField(default=0)
    requested_gpus = models.IntegerField(default=0)
    # Per workload (`pools.workload_key`) with pods bound here: [its pods on this node, its
    # replicas in the cluster], what the extender's capacity-pool spread filter counts.
    workloads = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=16, choices=NodeSource.choices)
    synced_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(allocatable_cpu_millis__gte=0)
                & models.Q(allocatable_memory_bytes__gte=0)
                & models.Q(allocatable_gpus__gte=0)
                & models.Q(requested_cpu_millis__gte=0)
                & models.Q(requested_memory_bytes__gte=0)
                & models.Q(requested_gpus__gte=0),
                name="node_quantities_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def cpu_utilisation(self) -> float:
        """Requested / allocatable cpu in [0, 1+]; 0 on zero capacity."""
        return (
            self.requested_cpu_millis / self.allocatable_cpu_millis
            if self.allocatable_cpu_millis
            else 0.0
        )

    @property
    def memory_utilisation(self) -> float:
        """Requested / allocatable memory; 0 on zero capacity."""
        if not self.allocatable_memory_bytes:
            return 0.0
        return self.requested_memory_bytes / self.allocatable_memory_bytes


class NodeLifetime(models.Model):
    """When a node was launched and removed, as node sync saw it: what showback prices.

    One open lifetime (removed_at null) per node name; the environment and NodePool are
    copied from the node's labels at launch, so a lifetime outlives its node and its
    environment.
    """

    name = models.CharField(max_length=253)
    environment = models.CharField(max_length=63, blank=True, db_index=True)
    nodepool = models.CharField(max_length=253, blank=True)
    instance_type = models.CharField(max_length=64, blank=True)
    zone = models.CharField(max_length=64, blank=True)
    capacity_type = models.CharField(
        max_length=16, choices=CapacityType.choices, default=CapacityType.UNKNOWN
    )
    launched_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["launched_at", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(removed_at__isnull=True),
                name="nodelifetime_one_open_per_node",
            ),
            models.CheckConstraint(
                condition=models.Q(removed_at__isnull=True)
                | models.Q(removed_at__gte=models.F("launched_at")),
                name="nodelifetime_removed_after_launch",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} from {self.launched_at:%Y-%m-%d %H:%M}"


class CommitmentSample(models.Model):
    """Workload Commitment of the whole cluster at one sync (scheduler/commitment.py, as_dict)."""

    taken_at = models.DateTimeField(db_index=True)
    nodes = models.IntegerField()
    figures = models.JSONField()

    class Meta:
        ordering = ["-taken_at"]

    def __str__(self) -> str:
        return f"commitment at {self.taken_at:%Y-%m-%d %H:%M:%S}"


class ReplayReport(models.Model):
    """One stored `scheduler_replay` invocation: its parameters and every run's figures."""

    created_at = models.DateTimeField()
    parts = models.CharField(max_length=64)
    seed = models.IntegerField()
    nodes = models.IntegerField()
    placements = models.BigIntegerField()
    latency_class_placements = models.BigIntegerField()
    parse_seconds = models.FloatField()
    report = models.JSONField()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"replay {self.parts} seed {self.seed} at {self.created_at:%Y-%m-%d %H:%M}"


class FreezeHolder(models.TextChoices):
    """What Kiln is doing on a frozen node: a rollout under analysis or a chaos experiment."""

    ROLLOUT = "rollout", "Rollout"
    EXPERIMENT = "experiment", "Chaos experiment"


class DisruptionFreeze(models.Model):
    """One node kept out of Karpenter's voluntary disruption while one holder works on it.

    The row is the intent, written before the node is touched: `applied_at` is set once
    the node carries `karpenter.sh/do-not-disrupt`, `released_at` when the holder no longer
    needs it (done, its pods moved, its lease lapsed, the hard bound passed) and
    `lifted_at` once nothing of it is left on the node. `renewed_at` is the holder's last
    word: past `renewed_at + lease_seconds` the holder is taken for gone and the freeze
    reaped. Nothing holds past `bound_at`, the hard bound. At most one open (unreleased)
    freeze per node and holder.
    """

    node = models.CharField(max_length=253, db_index=True)
    holder_kind = models.CharField(max_length=16, choices=FreezeHolder.choices)
    holder_id = models.CharField(max_length=64)
    # What the holder is, for people (the service or experiment name), and its team's slug,
    # so the scheduler page shows a freeze only to those who may see its holder.
    holder_label = models.CharField(max_length=200, blank=True, default="")
    team = models.CharField(max_length=63, blank=True, default="")
    since = models.DateTimeField()
    bound_at = models.DateTimeField()
    renewed_at = models.DateTimeField()
    lease_seconds = models.FloatField()
    applied_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    release_reason = models.CharField(max_length=200, blank=True, default="")
    lifted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-since", "node"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "holder_kind", "holder_id"],
                condition=models.Q(released_at__isnull=True),
                name="disruptionfreeze_one_open_per_node_holder",
            ),
            models.CheckConstraint(
                condition=models.Q(bound_at__gte=models.F("since")),
                name="disruptionfreeze_bound_after_since",
            ),
            models.CheckConstraint(
                condition=models.Q(lease_seconds__gt=0), name="disruptionfreeze_lease_positive"
            ),
        ]
        indexes = [
            models.Index(fields=["holder_kind", "holder_id"], name="disruptionfreeze_holder"),
            models.Index(
                fields=["node"],
                condition=models.Q(lifted_at__isnull=True),
                name="disruptionfreeze_unlifted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node} frozen for {self.holder_kind} {self.holder_id}"

    @property
    def is_open(self) -> bool:
        """Still held: not released."""
        return self.released_at is None
