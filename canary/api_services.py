"""Service registry REST API: list the services rollouts shift traffic for, register one."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from canary import selectors, services
from canary.api_schema import ServiceOutput
from canary.models import MetricsSource
from kiln.api_fields import StrictCharField, StrictSerializer, StrictSlugField, StrictURLField
from kiln.errors import NotFound
from kiln.identity.models import Team
from kiln.identity.permissions import actor_from_request
from kiln.openapi import documented, errors
from portal.validation import DNS_LABEL_RE


class ServiceListCreateApi(APIView):
    """GET: services the caller may see. POST: register a service (team engineers)."""

    @extend_schema_serializer(component_name="CanaryServiceCreate")
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
        fields = self.InputSerializer.validated(request)
        team = Team.objects.filter(slug=fields.pop("team")).first()
        if team is None:
            raise NotFound("no such team")
        service = services.service_create(actor=actor, team=team, **fields)
        return Response(ServiceOutput(service).data, status=201)
