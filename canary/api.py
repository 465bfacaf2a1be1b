"""Rollout REST API: thin views that validate, call one service or selector, and serialise.

The response serializers come first: they type every field of what the views answer
(`canary.selectors` builds the rollout shapes, which the dashboard's stream shares);
they describe and hold no rule. Services validate and answer 400 with the reason; the
limits written here are theirs, documented for clients.

A few lines past ~400: one thin view per rollout and service endpoint, each with the
schema its clients read; the views share their helpers here rather than across files.
"""

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

from canary import selectors, services
from canary.models import Arm, MetricsSource, Rollout, RolloutStatus
from kiln.api_fields import StrictCharField, StrictSerializer, StrictSlugField, StrictURLField
from kiln.errors import NotFound
from kiln.identity.models import Team
from kiln.identity.permissions import actor_from_request
from kiln.openapi import PAGE_PARAMETERS, documented, errors, paginated
from kiln.pagination import LimitOffsetPagination
from kiln.params import parse_choice
from portal.validation import DNS_LABEL_RE

# --- responses ---------------------------------------------------------------------------


class ServiceOutput(serializers.Serializer):
    """A service that rollouts shift traffic for."""

    id = serializers.UUIDField()
    team = serializers.CharField(source="team.slug")
    name = serializers.CharField()
    namespace = serializers.CharField()
    host = serializers.CharField()
    metrics_source = serializers.ChoiceField(choices=MetricsSource.values)
    sim_traffic_class = serializers.CharField()

    class Meta:
        ref_name = "CanaryService"


class RolloutServiceOutput(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    team = serializers.CharField()

    class Meta:
        ref_name = "RolloutService"


class RolloutOutput(serializers.Serializer):
    """A rollout's state (`canary.selectors.rollout_summary`)."""

    id = serializers.UUIDField()
    service = RolloutServiceOutput()
    baseline_version = serializers.CharField()
    canary_version = serializers.CharField()
    steps = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=100))
    ticks_per_step = serializers.IntegerField(min_value=1)
    tick_seconds = serializers.FloatField()
    status = serializers.ChoiceField(choices=RolloutStatus.values)
    weight = serializers.IntegerField(min_value=0, max_value=100, help_text="Canary traffic, %.")
    ticks_done = serializers.IntegerField(min_value=0)
    reason = serializers.CharField(allow_blank=True)
    finished = serializers.BooleanField()
    analysis = serializers.DictField(
        child=serializers.JSONField(),
        help_text="The latest analysis: bounds, CUSUM, per-channel sample sizes.",
    )
    requests_needed = serializers.FloatField(
        allow_null=True, help_text="Requests per arm that would likely settle it (inconclusive)."
    )
    minutes_needed = serializers.FloatField(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "Rollout"


RolloutPageOutput = paginated(RolloutOutput, "RolloutPage")


def _stat(help_text: str = "") -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=help_text)


class TickOutput(serializers.Serializer):
    """One analysis tick's statistics (null where the window had no evidence)."""

    tick = serializers.IntegerField(min_value=0)
    weight = serializers.IntegerField(min_value=0, max_value=100)
    action = serializers.CharField()
    canary_error_rate = _stat()
    baseline_error_rate = _stat()
    llr = _stat("SPRT log-likelihood ratio")
    llr_lower = _stat()
    llr_upper = _stat()
    cusum = _stat("CUSUM statistic of latency")
    cusum_median = _stat()
    cusum_tail = _stat()
    cusum_threshold = _stat()
    requests_needed = _stat()
    minutes_needed = _stat()
    settle = serializers.CharField(allow_blank=True)
    empty = serializers.BooleanField(help_text="A window without traffic or metrics: no evidence.")
    canary_p50_ms = _stat()
    baseline_p50_ms = _stat()
    canary_p99_ms = _stat()
    baseline_p99_ms = _stat()
    reason = serializers.CharField(allow_blank=True)

    class Meta:
        ref_name = "RolloutTick"


class DecisionOutput(serializers.Serializer):
    """A state-changing decision: who, which weight change, why."""

    id = serializers.IntegerField()
    tick = serializers.IntegerField(min_value=0)
    kind = serializers.CharField()
    actor = serializers.CharField()
    from_weight = serializers.IntegerField(min_value=0, max_value=100)
    to_weight = serializers.IntegerField(min_value=0, max_value=100)
    reason = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()

    class Meta:
        ref_name = "RolloutDecision"


class RolloutSeriesOutput(serializers.Serializer):
    """A rollout with every tick's statistics and every decision (`rollout_series`)."""

    rollout = RolloutOutput()
    ticks = TickOutput(many=True)
    decisions = DecisionOutput(many=True)

    class Meta:
        ref_name = "RolloutSeries"


class ObservationOutput(serializers.Serializer):
    """A pushed observation, queued for the next tick."""

    id = serializers.IntegerField()
    arm = serializers.ChoiceField(choices=Arm.values)
    requests = serializers.IntegerField(min_value=0)
    errors = serializers.IntegerField(min_value=0)
    samples = serializers.IntegerField(min_value=0, help_text="Latency samples kept.")

    class Meta:
        ref_name = "Observation"


# --- views -------------------------------------------------------------------------------


class ServiceListCreateApi(APIView):
    """GET: services the caller may see. POST: register a service (team engineers)."""

    class InputSerializer(StrictSerializer):
        team = StrictSlugField()
        name = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        namespace = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        # Left out: the service's own default ("" = derived from name and namespace); a JSON
        # Schema `default` must satisfy the field, and "" is not a host.
        host = StrictCharField(max_length=253, required=False)
        metrics_source = serializers.ChoiceField(
            MetricsSource.values, default=MetricsSource.SIMULATED
        )
        prometheus_url = StrictURLField(required=False)  # left out: none (simulated metrics)
        queries = serializers.DictField(child=StrictCharField(), required=False, default=dict)
        sim_traffic_class = StrictCharField(required=False, default="steady")

        class Meta:
            ref_name = "CanaryServiceCreate"

    @extend_schema(operation_id="canary_services_list", responses=ServiceOutput(many=True))
    def get(self, request):
        actor = actor_from_request(request)
        return Response(ServiceOutput(selectors.service_list(viewer=actor), many=True).data)

    @extend_schema(
        operation_id="canary_services_create",
        request=InputSerializer,
        responses={201: ServiceOutput, **errors(404, 409)},
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
        return Response(ServiceOutput(service).data, status=201)


class RolloutListCreateApi(APIView):
    """GET: rollouts the caller may see. POST: start a rollout (engineers of the service's team)."""

    class InputSerializer(StrictSerializer):
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
        description="The rollouts the caller may see, newest first, a page at a time.",
        parameters=[OpenApiParameter("status", str, enum=RolloutStatus.values), *PAGE_PARAMETERS],
        responses=RolloutPageOutput,
    )
    def get(self, request):
        actor = actor_from_request(request)
        status = parse_choice(request.query_params.get("status"), "status", RolloutStatus.values)
        rollouts = selectors.rollout_list(viewer=actor, status=status)
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(rollouts, request, view=self)
        return paginator.get_paginated_response([selectors.rollout_summary(r) for r in page])

    @extend_schema(
        operation_id="rollouts_create",
        request=InputSerializer,
        responses={201: RolloutOutput, **errors(404, 409)},
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

    @extend_schema(operation_id="rollouts_retrieve", responses=RolloutSeriesOutput)
    def get(self, request, rollout_id):
        rollout = selectors.rollout_get(viewer=actor_from_request(request), rollout_id=rollout_id)
        return Response(selectors.rollout_series(rollout))


class ReasonInput(StrictSerializer):
    reason = StrictCharField(required=False, default="", allow_blank=True, max_length=2000)

    class Meta:
        ref_name = "RolloutReason"


class RequiredReasonInput(StrictSerializer):
    reason = StrictCharField(max_length=2000)

    class Meta:
        ref_name = "RolloutRetry"


class ExtendInput(RequiredReasonInput):
    ticks = serializers.IntegerField(
        required=False, default=None, min_value=1, max_value=services.MAX_EXTENSION_TICKS
    )

    class Meta:
        ref_name = "RolloutExtend"


class RolloutActionApi(APIView):
    """POST: a person's decision on one rollout: validate, call its service, answer the rollout.

    Each decision is a subclass made by `decision(...)`, which names its body (the
    service's keyword arguments besides the actor and the rollout) and its service.
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


def decision(
    operation_id: str, body: type[serializers.Serializer], service: Callable[..., Rollout]
) -> Callable[[type[RolloutActionApi]], type[RolloutActionApi]]:
    """Make a RolloutActionApi: its body, its service, and its OpenAPI operation (or a 409)."""

    def make(api: type[RolloutActionApi]) -> type[RolloutActionApi]:
        api.InputSerializer, api.decide = body, staticmethod(service)
        responses = {200: RolloutOutput, **errors(409)}
        return extend_schema_view(
            post=extend_schema(operation_id=operation_id, request=body, responses=responses)
        )(api)

    return make


@decision("rollouts_abort", ReasonInput, services.rollout_abort)
class RolloutAbortApi(RolloutActionApi):
    """POST: abort the rollout and send all traffic to the baseline (team engineers)."""


@decision("rollouts_promote", ReasonInput, services.rollout_promote)
class RolloutPromoteApi(RolloutActionApi):
    """POST: promote by hand, overriding the analysis (the team's approvers, platform admins)."""


@decision("rollouts_retry", RequiredReasonInput, services.rollout_retry)
class RolloutRetryApi(RolloutActionApi):
    """POST: restart the analysis of an inconclusive rollout from its first step (team engineers)."""


@decision("rollouts_extend", ExtendInput, services.rollout_extend)
class RolloutExtendApi(RolloutActionApi):
    """POST: give an inconclusive rollout more ticks, keeping its evidence (team engineers)."""


class RolloutObservationApi(APIView):
    """POST: push one arm's requests, errors and latency samples for the next tick."""

    class InputSerializer(StrictSerializer):
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
            202: OpenApiResponse(ObservationOutput, description="Queued for the next tick."),
            **errors(409),
        },
    )
    def post(self, request, rollout_id):
        actor = actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        obs = services.observation_push(actor=actor, rollout=rollout, **data.validated_data)
        return Response(ObservationOutput(obs).data, status=202)
