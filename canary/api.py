"""Rollout REST API: thin views that validate, call one service or selector, and serialise.

The responses are typed in `canary.api_schema` and the service registry's views are in
`canary.api_services`. Services validate and answer 400 with the reason; the limits
written here are theirs, documented for clients.
"""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from canary import selectors, services
from canary.api_schema import (
    ObservationOutput,
    RolloutOutput,
    RolloutPageOutput,
    RolloutSeriesOutput,
)
from canary.models import Rollout, RolloutStatus
from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.identity.permissions import actor_from_request
from kiln.openapi import PAGE_PARAMETERS, documented, errors
from kiln.pagination import LimitOffsetPagination
from kiln.params import parse_choice
from portal.validation import DNS_LABEL_RE


def _bounded(
    json_type: str, *, minimum: float, maximum: float, default: float
) -> serializers.Field:
    """An optional number the service types and checks, documented with its bounds and default."""
    return documented(
        serializers.JSONField(required=False, default=default),
        type=json_type,
        minimum=minimum,
        maximum=maximum,
        default=default,
    )


class RolloutListCreateApi(APIView):
    """GET: rollouts the caller may see. POST: start a rollout (engineers of the service's team)."""

    @extend_schema_serializer(component_name="RolloutCreate")
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
        ticks_per_step = _bounded("integer", minimum=1, maximum=1000, default=8)
        tick_seconds = _bounded("number", minimum=0.2, maximum=3600, default=60.0)
        config = documented(
            serializers.JSONField(required=False, default=dict),
            type="object",
            description="AnalysisConfig overrides: " + ", ".join(sorted(services.CONFIG_KEYS)),
        )

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
        fields = self.InputSerializer.validated(request)
        service = selectors.service_get(viewer=actor, service_id=fields.pop("service"))
        rollout = services.rollout_create(actor=actor, service=service, **fields)
        return Response(selectors.rollout_summary(rollout), status=201)


class RolloutDetailApi(APIView):
    """GET: one rollout with every tick's statistics and every decision."""

    @extend_schema(operation_id="rollouts_retrieve", responses=RolloutSeriesOutput)
    def get(self, request, rollout_id):
        rollout = selectors.rollout_get(viewer=actor_from_request(request), rollout_id=rollout_id)
        return Response(selectors.rollout_series(rollout))


@extend_schema_serializer(component_name="RolloutReason")
class ReasonInput(StrictSerializer):
    reason = StrictCharField(required=False, default="", allow_blank=True, max_length=2000)


@extend_schema_serializer(component_name="RolloutRetry")
class RequiredReasonInput(StrictSerializer):
    reason = StrictCharField(max_length=2000)


@extend_schema_serializer(component_name="RolloutExtend")
class ExtendInput(RequiredReasonInput):
    ticks = serializers.IntegerField(
        required=False, default=None, min_value=1, max_value=services.MAX_EXTENSION_TICKS
    )


class RolloutActionApi(APIView):
    """POST: a person's decision on one rollout: validate, call its service, answer the rollout.

    Each decision is a subclass made by `decision(...)`, which names its body (the
    service's keyword arguments besides the actor and the rollout) and its service.
    """

    InputSerializer: type[StrictSerializer]
    decide: Callable[..., Rollout]

    def post(self, request, rollout_id):
        actor = actor_from_request(request)
        body = self.InputSerializer.validated(request)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        rollout = type(self).decide(actor=actor, rollout=rollout, **body)
        return Response(selectors.rollout_summary(rollout))


def decision(
    operation_id: str, body: type[StrictSerializer], service: Callable[..., Rollout]
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

    @extend_schema_serializer(component_name="ObservationPush")
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
        body = self.InputSerializer.validated(request)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        obs = services.observation_push(actor=actor, rollout=rollout, **body)
        return Response(ObservationOutput(obs).data, status=202)


# The POST endpoints on one rollout, by the last segment of their path (canary/urls.py).
ROLLOUT_ACTIONS: dict[str, type[APIView]] = {
    "abort": RolloutAbortApi,
    "promote": RolloutPromoteApi,
    "retry": RolloutRetryApi,
    "extend": RolloutExtendApi,
    "observations": RolloutObservationApi,
}
