"""Chaos REST API: create, list, detail (with the live lease) and abort experiments. Thin: services do
the work; answers are rendered by the typed output serializers of canary/chaos/api_schema.py."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from canary.chaos import api_schema as out
from canary.chaos import selectors as chaos_selectors
from canary.chaos import services as chaos_services
from canary.chaos.api_faults import ChaosMeshFields
from canary.chaos.leases import TIMING_FIELDS
from canary.chaos.models import ChaosExperiment, ExperimentStatus, FaultKind
from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.identity.drf import HasKilnRole, role_required
from kiln.identity.permissions import ENGINEER, actor_from_request
from kiln.openapi import PAGE_PARAMETERS, documented, errors
from kiln.pagination import LimitOffsetPagination
from kiln.params import INT_MAX, parse_choice
from portal.validation import DNS_LABEL_RE


@extend_schema_serializer(component_name="ExperimentStopConditionSpec")
class StopConditionSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=chaos_services.STOP_CONDITION_KINDS)
    threshold = serializers.FloatField(required=False, min_value=0)


def experiment_payload(exp: ChaosExperiment, *, with_injections: bool = False) -> dict[str, Any]:
    """The API's representation of an experiment, its lease and (on detail) its injections."""
    body: dict[str, Any] = {
        "id": str(exp.pk),
        "name": exp.name,
        "team": exp.team.slug,
        "namespace": exp.namespace,
        "selector": exp.selector,
        "service": exp.service,
        "fault": exp.fault,
        "magnitude": {
            "delay_ms": exp.delay_ms,
            "abort_http_status": exp.abort_http_status,
            "percent": exp.percent,
        },
        "params": exp.params,
        "duration_seconds": exp.duration_seconds,
        "max_duration_seconds": exp.max_duration_seconds,
        "blast_radius": {"max_pods": exp.max_pods, "max_percent": exp.max_percent},
        "stop_conditions": exp.stop_conditions,
        "continue_without_metrics": exp.continue_without_metrics,
        "may_overlap": exp.may_overlap,
        "status": exp.status,
        "end_reason": exp.end_reason,
        "end_evidence": exp.end_evidence,
        "created_by": exp.created_by_name,
        "created_at": exp.created_at,
        "started_at": exp.started_at,
        "ended_at": exp.ended_at,
        "timings": {name: getattr(exp, name) for name in TIMING_FIELDS},
        "lease": asdict(chaos_selectors.lease_state(exp)),
    }
    if with_injections:
        body["injections"] = list(chaos_selectors.injection_list(exp))  # rows: InjectionOutput
    return body


def _detail(exp: ChaosExperiment) -> dict[str, Any]:
    """An experiment with its injections, rendered by its typed output serializer."""
    return out.ExperimentDetailOutput(experiment_payload(exp, with_injections=True)).data


class ExperimentListCreateApi(APIView):
    """GET: experiments the caller may see. POST: define and start an experiment (owning team's engineers)."""

    @extend_schema_serializer(component_name="ExperimentCreate")
    class InputSerializer(ChaosMeshFields, StrictSerializer):
        name = StrictCharField(max_length=100)
        namespace = documented(StrictCharField(max_length=63), pattern=DNS_LABEL_RE.pattern)
        selector = documented(
            serializers.DictField(child=StrictCharField(max_length=63), allow_empty=False),
            type="object",
            additionalProperties={"type": "string", "minLength": 1, "maxLength": 63},
            minProperties=1,
            description="matchLabels of the target pods; never empty (never the whole namespace).",
        )
        service = StrictCharField(max_length=253, required=False, allow_blank=True, default="")
        fault = serializers.ChoiceField(choices=FaultKind.values)
        # chaos_services._validate checks these per fault kind (one 400 naming every field);
        # their ranges are documented here.
        delay_ms = documented(
            serializers.IntegerField(required=False, allow_null=True),
            minimum=1,
            maximum=600_000,
            description="http-delay: milliseconds added.",
        )
        abort_http_status = documented(
            serializers.IntegerField(required=False, allow_null=True),
            minimum=400,
            maximum=599,
            description="http-abort: the status answered.",
        )
        percent = documented(
            serializers.FloatField(required=False, default=100.0),
            minimum=0,
            exclusiveMinimum=True,
            maximum=100,
            default=100.0,
            description="HTTP faults: share of requests faulted.",
        )
        duration_seconds = documented(
            serializers.IntegerField(),
            minimum=1,
            maximum=chaos_services.MAX_HARD_SECONDS,
            description="Seconds; at most max_duration_seconds.",
        )
        max_duration_seconds = documented(
            serializers.IntegerField(), minimum=1, maximum=chaos_services.MAX_HARD_SECONDS
        )
        max_pods = documented(
            serializers.IntegerField(required=False, allow_null=True),
            minimum=1,
            maximum=INT_MAX,
            description="Blast radius: set max_pods, max_percent or both.",
        )
        max_percent = documented(
            serializers.FloatField(required=False, allow_null=True),
            minimum=0,
            exclusiveMinimum=True,
            maximum=100,
        )
        stop_conditions = StopConditionSerializer(many=True, required=False, default=list)
        continue_without_metrics = documented(
            serializers.BooleanField(required=False, default=False),
            description="Keep running when a stop condition cannot be evaluated (its metrics "
            "source down or silent); by default the experiment aborts rather than run blind.",
        )
        may_overlap = documented(
            serializers.BooleanField(required=False, default=False),
            description="May run alongside another experiment on an overlapping target, if "
            "that one says so too.",
        )
        start = serializers.BooleanField(required=False, default=True)

    def get_permissions(self):
        # Reads are the API's default (any Kiln role), narrowed by the visibility rule, as the
        # pages are: an approver reads its team's experiments on both.
        if self.request.method == "POST":
            return [role_required(ENGINEER)()]
        return [HasKilnRole()]

    @extend_schema(
        operation_id="chaos_experiment_list",
        parameters=[
            OpenApiParameter("status", str, enum=ExperimentStatus.values),
            *PAGE_PARAMETERS,
        ],
        responses=out.ExperimentPageOutput,
    )
    def get(self, request: Request) -> Response:
        status = parse_choice(request.query_params.get("status"), "status", ExperimentStatus.values)
        qs = chaos_selectors.experiment_list(viewer=actor_from_request(request), status=status)
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(
            out.ExperimentOutput([experiment_payload(e) for e in page], many=True).data
        )

    @extend_schema(
        operation_id="chaos_experiment_create",
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "maxLength": 200},
                OpenApiParameter.HEADER,
                description="Resubmitting the same experiment with the same key returns the "
                "first one (200, Idempotent-Replayed: true) instead of a second experiment.",
            )
        ],
        responses={
            201: out.ExperimentDetailOutput,
            200: out.ExperimentDetailOutput,
            **errors(409, 422, 503),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.InputSerializer.validated(request)
        start = data.pop("start")
        data["stop_conditions"] = [dict(c) for c in data.get("stop_conditions") or []]
        exp, created = chaos_services.experiment_submit(
            actor=actor_from_request(request),
            data=data,
            start=start,
            idempotency_key=request.headers.get("Idempotency-Key", ""),
        )
        headers = {"Location": f"/api/v1/chaos/experiments/{exp.pk}/"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(_detail(exp), status=201 if created else 200, headers=headers)


class ExperimentDetailApi(APIView):
    """One experiment with its live lease state and injections (any Kiln role that may see it)."""

    @extend_schema(operation_id="chaos_experiment_detail", responses=out.ExperimentDetailOutput)
    def get(self, request: Request, experiment_id) -> Response:
        exp = chaos_selectors.experiment_get(
            viewer=actor_from_request(request), experiment_id=experiment_id
        )
        return Response(_detail(exp))


class ExperimentAbortApi(APIView):
    """Abort an experiment now: its fault is reverted before the response."""

    permission_classes = [role_required(ENGINEER)]

    @extend_schema_serializer(component_name="ExperimentAbort")
    class InputSerializer(StrictSerializer):
        reason = StrictCharField(max_length=200, required=False, allow_blank=True, default="")

    @extend_schema(
        operation_id="chaos_experiment_abort",
        request=InputSerializer,
        responses={200: out.ExperimentDetailOutput, **errors(409, 503)},
    )
    def post(self, request: Request, experiment_id) -> Response:
        actor = actor_from_request(request)
        reason = self.InputSerializer.validated(request)["reason"]
        exp = chaos_selectors.experiment_get(viewer=actor, experiment_id=experiment_id)
        exp = chaos_services.experiment_abort(actor=actor, experiment=exp, reason=reason)
        return Response(_detail(exp))


def lever_payload(lever: Any, *, team: str | None = None) -> dict[str, Any]:
    """A lever as the API shows it; a scope whose lever was never moved is released."""
    if lever is None:
        return {
            "scope": "team" if team else "platform",
            "team": team,
            "engaged": False,
            "engaged_by": "",
            "engaged_reason": "",
            "engaged_at": None,
            "released_by": "",
            "released_reason": "",
            "released_at": None,
        }
    body = chaos_services.lever_summary(lever)
    body["engaged_at"], body["released_at"] = lever.engaged_at, lever.released_at
    return body


class LeverListApi(APIView):
    """The platform lever and the team levers the caller may see, engaged first."""

    @extend_schema(operation_id="chaos_lever_list", responses=out.LeverOutput(many=True))
    def get(self, request: Request) -> Response:
        levers = chaos_selectors.levers_for(viewer=actor_from_request(request))
        rows = [lever_payload(lever) for lever in levers]
        if not any(row["scope"] == "platform" for row in rows):
            rows.insert(0, lever_payload(None))
        return Response(out.LeverOutput(rows, many=True).data)


class LeverMoveApi(APIView):
    """Engage or release the platform lever (`team` absent) or a team's; a reason is required."""

    permission_classes = [role_required(ENGINEER)]
    action: str = "engage"

    @extend_schema_serializer(component_name="LeverMove")
    class InputSerializer(StrictSerializer):
        reason = documented(
            StrictCharField(max_length=300),
            description="Why: required, recorded with who moved the lever.",
        )

    def move(self, request: Request, team: str | None) -> Response:
        actor = actor_from_request(request)
        reason = self.InputSerializer.validated(request)["reason"]
        if team is not None:
            chaos_selectors.lever_get(viewer=actor, team_slug=team)  # 404 for a hidden team
        move = (
            chaos_services.lever_engage if self.action == "engage" else chaos_services.lever_release
        )
        lever = move(actor=actor, team_slug=team, reason=reason)
        return Response(out.LeverOutput(lever_payload(lever)).data)


def _lever_schema(operation_id: str):
    return extend_schema(
        operation_id=operation_id,
        request=LeverMoveApi.InputSerializer,
        responses={200: out.LeverOutput, **errors(409)},
    )


class PlatformLeverEngageApi(LeverMoveApi):
    """Engage the platform lever: every running experiment stops now, none starts until it is
    released (platform admins)."""

    @_lever_schema("chaos_platform_lever_engage")
    def post(self, request: Request) -> Response:
        return self.move(request, None)


class PlatformLeverReleaseApi(LeverMoveApi):
    """Release the platform lever: experiments may start again (platform admins)."""

    action = "release"

    @_lever_schema("chaos_platform_lever_release")
    def post(self, request: Request) -> Response:
        return self.move(request, None)


class TeamLeverEngageApi(LeverMoveApi):
    """Engage a team's lever: its running experiments stop now, none of its starts until it is
    released (the team's engineers, platform admins)."""

    @_lever_schema("chaos_team_lever_engage")
    def post(self, request: Request, team: str) -> Response:
        return self.move(request, team)


class TeamLeverReleaseApi(LeverMoveApi):
    """Release a team's lever: its experiments may start again."""

    action = "release"

    @_lever_schema("chaos_team_lever_release")
    def post(self, request: Request, team: str) -> Response:
        return self.move(request, team)
