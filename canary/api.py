"""Rollout REST API: thin views that validate, call one service or selector, and serialise."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from canary import selectors, services
from canary.models import MetricsSource
from kiln.errors import NotFound
from kiln.identity.permissions import actor_from_request
from portal.models import Team


class ServiceListCreateApi(APIView):
    """GET: services the caller may see. POST: register a service (team engineers)."""

    class InputSerializer(serializers.Serializer):
        team = serializers.SlugField()
        name = serializers.CharField(max_length=63)
        namespace = serializers.CharField(max_length=63)
        host = serializers.CharField(max_length=253, required=False, default="")
        metrics_source = serializers.ChoiceField(
            MetricsSource.values, default=MetricsSource.SIMULATED
        )
        prometheus_url = serializers.URLField(required=False, default="")
        queries = serializers.DictField(child=serializers.CharField(), required=False, default=dict)
        sim_traffic_class = serializers.CharField(required=False, default="steady")

    def get(self, request):
        actor = actor_from_request(request)
        return Response([_service(s) for s in selectors.service_list(viewer=actor)])

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
        baseline_version = serializers.CharField(max_length=63)
        canary_version = serializers.CharField(max_length=63)
        steps = serializers.JSONField(required=False, default=None)
        ticks_per_step = serializers.JSONField(required=False, default=8)
        tick_seconds = serializers.JSONField(required=False, default=60.0)
        config = serializers.JSONField(required=False, default=dict)

    def get(self, request):
        actor = actor_from_request(request)
        rollouts = selectors.rollout_list(viewer=actor, status=request.query_params.get("status"))
        return Response([selectors.rollout_summary(r) for r in rollouts[:200]])

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

    def get(self, request, rollout_id):
        rollout = selectors.rollout_get(viewer=actor_from_request(request), rollout_id=rollout_id)
        return Response(selectors.rollout_series(rollout))


class _ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, default="", allow_blank=True, max_length=2000)


class RolloutAbortApi(APIView):
    """POST: abort the rollout and send all traffic to the baseline (team engineers)."""

    def post(self, request, rollout_id):
        actor = actor_from_request(request)
        data = _ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        rollout = services.rollout_abort(actor=actor, rollout=rollout, **data.validated_data)
        return Response(selectors.rollout_summary(rollout))


class RolloutPromoteApi(APIView):
    """POST: promote by hand, overriding the analysis (approvers, platform admins)."""

    def post(self, request, rollout_id):
        actor = actor_from_request(request)
        data = _ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rollout = selectors.rollout_get(viewer=actor, rollout_id=rollout_id)
        rollout = services.rollout_promote(actor=actor, rollout=rollout, **data.validated_data)
        return Response(selectors.rollout_summary(rollout))


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
