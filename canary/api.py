"""Rollout REST API: thin views that validate, call one service or selector, and serialise."""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from canary import api_schema as out
from canary import selectors, services
from canary.models import MetricsSource, Rollout, RolloutStatus
from kiln.api_fields import StrictCharField, StrictSlugField, StrictURLField
from kiln.errors import InvalidInput, NotFound
from kiln.identity.permissions import actor_from_request
from kiln.openapi import documented, errors
from portal.models import Team
from portal.validation import DNS_LABEL_RE


class ServiceListCreateApi(APIView):
    """GET: services the caller may see. POST: register a service (team engineers)."""

    class InputSerializer(serializers.Serializer):
        team = StrictSlugField()
        name = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        namespace = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        host = StrictCharField(max_length=253, required=False, default="")
        metrics_source = serializers.ChoiceField(
            MetricsSource.values, default=MetricsSource.SIMULATED
        )
        prometheus_url = StrictURLField(required=False, default="")
        queries = serializers.DictField(child=StrictCharField(), required=False, default=dict)
        sim_traffic_class = StrictCharField(required=False, default="steady")

        class Meta:
            ref_name = "CanaryServiceCreate"

    @extend_schema(operation_id="canary_services_list", responses=out.ServiceOutput(many=True))
    def get(self, request):
        actor = actor_from_request(request)
        return Response([_service(s) for s in selectors.service_list(viewer=actor)])

    @extend_schema(
        operation_id="canary_services_create",
        request=InputSerializer,
        responses={201: out.ServiceOutput, **errors(404, 409)},
    )
    def post(self, request):
        actor = actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        team = Team.objects.filter(slug=fields.pop("team")).first()
        if team is None:
            raise NotFound("no such team")
        service = services.service_create(actor=actor, team=team, **fields)
        return Response(_service(service), status=201)


def _service(s) -> dict:
    return {
        "id": str(s.pk),
        "team": s.team.slug,
        "name": s.name,
        "namespace": s.namespace,
        "host": s.host,
        "metrics_source": s.metrics_source,
        "sim_traffic_class": s.sim_traffic_class,
    }


class RolloutListCreateApi(APIView):
    """GET: rollouts the caller may see. POST: start a rollout (engineers of the service's team)."""

    class InputSerializer(serializers.Serializer):
        service = serializers.UUIDField()
        baseline_version = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        canary_version = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        # Typed and checked by services.rollout_create (one 400 naming every field); documented:
        steps = documented(
            serializers.JSONField(required=False, default=None),
            type="array",
            items={"type": "integer", "minimum": 1, "maximum": 100},
            minItems=2,
            uniqueItems=True,
            description="Canary weights in percent, strictly increasing, ending at 100 "
            "(default [5, 25, 50, 100]).",
        )
        ticks_per_step = documented(
            serializers.JSONField(required=False, default=8),
            type="integer",
            minimum=1,
            maximum=1000,
            default=8,
        )
        tick_seconds = documented(
            serializers.JSONField(required=False, default=60.0),
            type="number",
            minimum=0.2,
            maximum=3600,
            default=60.0,
        )
        config = documented(
            serializers.JSONField(required=False, default=dict),
            type="object",
            description="AnalysisConfig overrides: " + ", ".join(sorted(services.CONFIG_KEYS)),
        )

        class Meta:
            ref_name = "RolloutCreate"

    @extend_schema(
        operation_id="rollouts_list",
        description="The 200 newest rollouts the caller may see.",
        parameters=[OpenApiParameter("status", str, enum=RolloutStatus.values)],
        responses=out.RolloutOutput(many=True),
    )
    def get(self, request):
        actor = actor_from_request(request)
        status = request.query_params.get("status") or None
        if status and status not in RolloutStatus.values:
            raise InvalidInput(
                f"status must be one of {', '.join(RolloutStatus.values)}",
                extra={"fields": {"status": [f"One of {', '.join(RolloutStatus.values)}."]}},
            )
        rollouts = selectors.rollout_list(viewer=actor, status=status)
        return Response([selectors.rollout_summary(r) for r in rollouts[:200]])

    @extend_schema(
        operation_id="rollouts_create",
        request=InputSerializer,
        responses={201: out.RolloutOutput, **errors(404, 409)},
    )
    def post(self, request):
        actor = actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        service = selectors.service_get(viewer=actor, service_id=fields.pop("service"))
        rollout = services.rollout_create(actor=actor, service=service, **fields)
        return Response(selectors.rollout_summary(rollout), status=201)


class RolloutDetailApi(APIView):
    """GET: one rollout with every tick's statistics and every decision."""

    @extend_schema(operation_id="rollouts_retrieve", responses=out.RolloutSeriesOutput)
    def get(self, request, rollout_id):
        rollout = selectors.rollout_get(viewer=actor_from_request(request), rollout_id=rollout_id)
        return Response(selectors.rollout_series(rollout))


class RolloutActionApi(APIView):
    """POST: a person's decision on one rollout: validate, call its service, answer the rollout.

    Subclasses name the decision's service and InputSerializer (the body; its fields are
    the service's keyword arguments besides the actor and the rollout).
    """

    InputSerializer: type[serializers.Serializer]
    decide: Callable[..., Rollout]

    def post(self, request, rollout_id):
        actor = actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        rollout = type(self).decide(actor=actor, rollout=rollout, **data.validated_data)
        return Response(selectors.rollout_summary(rollout))


def _decision_schema(operation_id: str, request: type[serializers.Serializer]):
    """The OpenAPI operation of a RolloutActionApi: its body, the rollout, or a 409."""
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            request=request,
            responses={200: out.RolloutOutput, **errors(409)},
        )
    )


class ReasonInput(serializers.Serializer):
    reason = StrictCharField(required=False, default="", allow_blank=True, max_length=2000)

    class Meta:
        ref_name = "RolloutReason"


class RequiredReasonInput(serializers.Serializer):
    reason = StrictCharField(max_length=2000)

    class Meta:
        ref_name = "RolloutRetry"


class ExtendInput(serializers.Serializer):
    reason = StrictCharField(max_length=2000)
    ticks = serializers.IntegerField(
        required=False, default=None, min_value=1, max_value=services.MAX_EXTENSION_TICKS
    )

    class Meta:
        ref_name = "RolloutExtend"


@_decision_schema("rollouts_abort", ReasonInput)
class RolloutAbortApi(RolloutActionApi):
    """POST: abort the rollout and send all traffic to the baseline (team engineers)."""

    InputSerializer = ReasonInput
    decide = staticmethod(services.rollout_abort)


@_decision_schema("rollouts_promote", ReasonInput)
class RolloutPromoteApi(RolloutActionApi):
    """POST: promote by hand, overriding the analysis (approvers, platform admins)."""

    InputSerializer = ReasonInput
    decide = staticmethod(services.rollout_promote)


@_decision_schema("rollouts_retry", RequiredReasonInput)
class RolloutRetryApi(RolloutActionApi):
    """POST: restart the analysis of an inconclusive rollout from its first step (team engineers)."""

    InputSerializer = RequiredReasonInput
    decide = staticmethod(services.rollout_retry)


@_decision_schema("rollouts_extend", ExtendInput)
class RolloutExtendApi(RolloutActionApi):
    """POST: give an inconclusive rollout more ticks, keeping its evidence (team engineers)."""

    InputSerializer = ExtendInput
    decide = staticmethod(services.rollout_extend)


class RolloutObservationApi(APIView):
    """POST: push one arm's requests, errors and latency samples for the next tick."""

    class InputSerializer(serializers.Serializer):
        arm = serializers.ChoiceField(["baseline", "canary"])
        requests = serializers.IntegerField(min_value=0)
        errors = serializers.IntegerField(min_value=0)
        latencies_ms = serializers.ListField(
            child=serializers.FloatField(min_value=0),
            required=False,
            default=list,
            max_length=services.MAX_LATENCY_SAMPLES,
        )
        observed_at = serializers.DateTimeField(required=False, default=None)

        class Meta:
            ref_name = "ObservationPush"

    @extend_schema(
        operation_id="rollouts_observations_create",
        request=InputSerializer,
        responses={
            202: OpenApiResponse(out.ObservationOutput, description="Queued for the next tick."),
            **errors(409),
        },
    )
    def post(self, request, rollout_id):
        actor = actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        obs = services.observation_push(actor=actor, rollout=rollout, **data.validated_data)
        return Response(
            {
                "id": obs.pk,
                "arm": obs.arm,
                "requests": obs.requests,
                "errors": obs.errors,
                "samples": len(obs.latencies_ms),
            },
            status=202,
        )
