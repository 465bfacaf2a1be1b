"""Scheduler REST API: the cluster's nodes with their pods, and Workload Commitment now.

Thin: parse and check the filters, call `scheduler.cluster_reads`, render typed output.
Any Kiln role may call; what each caller sees is decided by `kiln.identity.permissions`
(`can_view_node`, `can_view_pod`): a node an environment's NodePool launched is seen by
those who may view that environment.
"""

from __future__ import annotations

import re
from dataclasses import replace

from django.http import QueryDict
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln.cluster.backends import get_backend
from kiln.errors import InvalidInput, NotFound
from kiln.identity.drf import HasKilnRole
from kiln.identity.permissions import actor_from_request
from kiln.openapi import errors
from scheduler.cluster_reads import (
    CAPACITY_TYPES,
    NodeFilter,
    cluster_state,
    environment_namespace,
)

# Kubernetes names: a NodePool is a DNS-1123 subdomain, an environment (namespace) a DNS-1123 label.
LABEL_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SUBDOMAIN_PATTERN = rf"{LABEL_PATTERN}(\.{LABEL_PATTERN})*"
SUBDOMAIN_RE = re.compile(rf"{SUBDOMAIN_PATTERN}\Z")
LABEL_RE = re.compile(rf"{LABEL_PATTERN}\Z")
FILTERS = ("nodepool", "environment", "capacity_type")
# An environment's id, as every other API names it (portal's `env_` and 16 letters and digits);
# never a namespace, which has no underscore.
ENVIRONMENT_ID_PATTERN = r"env_[a-z0-9]{1,36}"
ENVIRONMENT_ID_RE = re.compile(rf"{ENVIRONMENT_ID_PATTERN}\Z")


def node_filter_from(query: QueryDict) -> NodeFilter:
    """The node list's filters, or InvalidInput naming every bad or unknown parameter."""
    problems: dict[str, list[str]] = {
        name: ["Unknown parameter."] for name in sorted(set(query) - set(FILTERS))
    }
    values = {name: query.get(name, "") for name in FILTERS}
    for name in FILTERS:
        if len(query.getlist(name)) > 1:
            problems[name] = ["Give it once."]
    pool, env, capacity = values["nodepool"], values["environment"], values["capacity_type"]
    # A parameter given is checked even when empty: `?nodepool=` is a mistake, not "any".
    if "nodepool" in query and (len(pool) > 253 or not SUBDOMAIN_RE.match(pool)):
        problems["nodepool"] = ["A NodePool name: lower-case DNS-1123 subdomain, at most 253."]
    if "environment" in query and not (
        ENVIRONMENT_ID_RE.match(env) or (len(env) <= 63 and LABEL_RE.match(env))
    ):
        problems["environment"] = [
            "An environment's id (env_…) or its namespace (DNS-1123 label, at most 63)."
        ]
    if "capacity_type" in query and capacity not in CAPACITY_TYPES:
        problems["capacity_type"] = [f"One of {', '.join(CAPACITY_TYPES)}."]
    if problems:
        raise InvalidInput("bad filter", extra={"fields": problems})
    return NodeFilter(nodepool=pool, environment=env, capacity_type=capacity)


@extend_schema_serializer(component_name="SchedulerResources")
class ResourcesSerializer(serializers.Serializer):
    """Millicores, bytes and GPUs."""

    cpu_millis = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    gpus = serializers.IntegerField()


@extend_schema_serializer(component_name="SchedulerPod")
class PodSerializer(serializers.Serializer):
    """A pod bound to the node (only pods the caller may see)."""

    namespace = serializers.CharField()
    name = serializers.CharField()
    workload_class = serializers.CharField(
        help_text="Effective class: missing or unknown label = latency-sensitive."
    )
    labelled_class = serializers.CharField(
        allow_null=True, help_text="The `kiln.dev/workload-class` label as set."
    )
    owner_kind = serializers.CharField()
    phase = serializers.CharField()
    requests = ResourcesSerializer(source="*")
    daemonset = serializers.BooleanField()
    explanation = serializers.JSONField(
        allow_null=True, help_text="The extender's `kiln.dev/score-explanation`."
    )


@extend_schema_serializer(component_name="SchedulerNode")
class NodeSerializer(serializers.Serializer):
    """A node of the cluster with its NodePool, environment and pods."""

    name = serializers.CharField()
    labels = serializers.DictField(child=serializers.CharField())
    nodepool = serializers.CharField()
    environment = serializers.CharField()
    capacity_type = serializers.ChoiceField(choices=[*CAPACITY_TYPES, "unknown"])
    instance_type = serializers.CharField()
    zone = serializers.CharField()
    allocatable = ResourcesSerializer()
    requested = ResourcesSerializer(
        help_text="Requests of every pod bound to it, DaemonSets included."
    )
    committed = ResourcesSerializer(
        help_text="Requests Workload Commitment counts (DaemonSets left out)."
    )
    pods = PodSerializer(many=True)
    hidden_pods = serializers.IntegerField(
        min_value=0,
        help_text="Pods on it the caller may not see (other teams', the platform's): counted, "
        "not named.",
    )


class NodeListApi(APIView):
    """GET /api/v1/scheduler/nodes/: the cluster's nodes the caller may see."""

    permission_classes = [HasKilnRole]

    @extend_schema_serializer(component_name="SchedulerNodeList")
    class OutputSerializer(serializers.Serializer):
        results = NodeSerializer(many=True)
        count = serializers.IntegerField()

    @extend_schema(
        operation_id="scheduler_nodes_list",
        parameters=[
            OpenApiParameter(
                "nodepool",
                {"type": "string", "maxLength": 253, "pattern": f"^{SUBDOMAIN_PATTERN}$"},
                description="`karpenter.sh/nodepool` equals this.",
            ),
            OpenApiParameter(
                "environment",
                {
                    "type": "string",
                    "maxLength": 63,
                    "pattern": f"^({ENVIRONMENT_ID_PATTERN}|{LABEL_PATTERN})$",
                },
                description="The environment's id (`env_…`, as every other API names it) or "
                "its namespace: nodes whose `kiln.dev/environment` is that namespace. An id "
                "the caller may not see is a 404, as one that does not exist.",
            ),
            OpenApiParameter("capacity_type", {"type": "string", "enum": list(CAPACITY_TYPES)}),
        ],
        responses={200: OutputSerializer, **errors(404, 503)},
    )
    def get(self, request: Request) -> Response:
        filters = node_filter_from(request.query_params)
        viewer, backend = actor_from_request(request), get_backend()
        if ENVIRONMENT_ID_RE.match(filters.environment):
            namespace = environment_namespace(
                viewer=viewer, backend=backend, environment_id=filters.environment
            )
            if namespace is None:
                raise NotFound("no such environment", extra={"environment": filters.environment})
            filters = replace(filters, environment=namespace)
        state = cluster_state(viewer=viewer, backend=backend, filters=filters)
        return Response(
            self.OutputSerializer({"results": state.nodes, "count": len(state.nodes)}).data
        )


@extend_schema_serializer(component_name="SchedulerSpread")
class SpreadSerializer(serializers.Serializer):
    """Node ratios of one resource: min, p50, p90, max (null when no node has it)."""

    min = serializers.FloatField(allow_null=True)
    p50 = serializers.FloatField(allow_null=True)
    p90 = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)


@extend_schema_serializer(component_name="SchedulerResourceCommitment")
class ResourceCommitmentSerializer(serializers.Serializer):
    """One resource's cluster figure (units: millicores, bytes, GPUs)."""

    committed = serializers.FloatField()
    capacity = serializers.FloatField()
    ratio = serializers.FloatField(
        allow_null=True, help_text="committed / capacity; null without capacity."
    )
    pending = serializers.FloatField(
        help_text="Requests of unbound pods, beside the ratio, never in it."
    )
    pending_ratio = serializers.FloatField(allow_null=True)
    stranded = serializers.FloatField(
        help_text="Free capacity on nodes committed >= 0.9 on another resource."
    )
    spread = SpreadSerializer()


@extend_schema_serializer(component_name="SchedulerNodeResource")
class NodeResourceSerializer(serializers.Serializer):
    """One node's figure for one resource."""

    committed = serializers.FloatField()
    capacity = serializers.FloatField()
    ratio = serializers.FloatField(allow_null=True)


@extend_schema_serializer(component_name="SchedulerNodeCommitment")
class NodeCommitmentSerializer(serializers.Serializer):
    """One node's Workload Commitment per resource."""

    name = serializers.CharField()
    cpu = NodeResourceSerializer()
    memory = NodeResourceSerializer()
    gpu = NodeResourceSerializer()


class CommitmentApi(APIView):
    """GET /api/v1/scheduler/commitment/: Workload Commitment now, cluster and per visible node."""

    permission_classes = [HasKilnRole]

    @extend_schema_serializer(component_name="SchedulerCommitment")
    class OutputSerializer(serializers.Serializer):
        resources = serializers.DictField(child=ResourceCommitmentSerializer())
        pending_pods = serializers.IntegerField()
        daemonset_pods = serializers.IntegerField()
        nodes = NodeCommitmentSerializer(many=True)

    @extend_schema(
        operation_id="scheduler_commitment",
        responses={200: OutputSerializer, **errors(503)},
    )
    def get(self, request: Request) -> Response:
        if request.query_params:
            raise InvalidInput(
                "this endpoint takes no parameters",
                extra={"fields": {k: ["Unknown parameter."] for k in sorted(request.query_params)}},
            )
        state = cluster_state(viewer=actor_from_request(request), backend=get_backend())
        visible = {n.name for n in state.nodes}
        data = state.commitment.as_dict()
        data["nodes"] = [n for n in data["nodes"] if n["name"] in visible]
        return Response(self.OutputSerializer(data).data)
