"""Environments REST API (/api/v1/environments/): thin views over portal services and selectors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln import conditional
from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.errors import InvalidInput
from kiln.identity.drf import HasKilnRole
from kiln.identity.permissions import actor_from_request
from kiln.openapi import documented, errors
from kiln.pagination import LimitOffsetPagination
from portal import api_schema as out
from portal import conf, selectors, services
from portal.lifecycle import Status
from portal.models import Environment
from portal.services import cost
from portal.validation import DNS_LABEL_RE, ENV_CLASSES, WORKLOAD_CLASSES, field_errors

# Any length a query string carries (Python reads up to 4,300 digits): a huge TTL is refused
# by its class limit, as the form refuses it, not as "not a whole number".
WHOLE_NUMBER = re.compile(r"-?[0-9]{1,4000}")


class StrictIntegerField(serializers.IntegerField):
    """An integer that must be a JSON number, not a string or a boolean."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean that must be a JSON true/false."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


@extend_schema_serializer(component_name="EnvironmentCreate")
class EnvironmentCreateInput(StrictSerializer):
    # The limits below are documented for clients; portal.validation.field_errors enforces them
    # (with the per-class TTL limit, which a schema cannot say) in the same response.
    team = StrictCharField(max_length=63)
    name = documented(StrictCharField(max_length=63), maxLength=40, pattern=DNS_LABEL_RE.pattern)
    env_class = serializers.ChoiceField(choices=ENV_CLASSES)
    ttl_hours = documented(
        StrictIntegerField(),
        minimum=1,
        maximum=max(conf.MAX_TTL_HOURS.values()),
        description="Hours; at most "
        + ", ".join(f"{k} {v}" for k, v in conf.MAX_TTL_HOURS.items()),
    )
    workload_class = serializers.ChoiceField(choices=WORKLOAD_CLASSES, default="latency-sensitive")
    cpu = documented(StrictIntegerField(), minimum=1, maximum=conf.MAX_CPU)
    memory_gib = documented(StrictIntegerField(), minimum=1, maximum=conf.MAX_MEMORY_GIB)
    gpu = documented(StrictIntegerField(default=0), minimum=0, maximum=conf.MAX_GPU, default=0)
    tenant_control_plane = StrictBooleanField(default=False)
    spot_node_pool = StrictBooleanField(default=False)
    database = StrictBooleanField(default=False)
    justification = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not isinstance(data, dict) or not isinstance(exc.detail, dict):
                raise
            # One response names every problem: add the checks on the values of the fields that
            # did parse (validate() runs only when all of them do).
            errors = dict(exc.detail)
            parsed = {k: v for k, v in data.items() if k in self.fields and k not in errors}
            for field, messages in field_errors(parsed).items():
                if field in parsed:
                    errors[field] = messages
            raise serializers.ValidationError(errors) from exc

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors = field_errors(attrs)
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


@extend_schema_serializer(component_name="EnvironmentApprove")
class ReasonInput(StrictSerializer):
    reason = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")


@extend_schema_serializer(component_name="EnvironmentReject")
class RejectInput(StrictSerializer):
    reason = StrictCharField(max_length=2000)


@extend_schema_serializer(component_name="EnvironmentExtend")
class ExtendInput(StrictSerializer):
    hours = StrictIntegerField(min_value=1, max_value=8760)


def _filters(request: Request) -> selectors.EnvironmentFilter:
    params = request.query_params
    env_class = params.get("env_class", "")
    if env_class and env_class not in ENV_CLASSES:
        raise InvalidInput(
            "unknown env_class",
            extra={"fields": {"env_class": [f"One of {', '.join(ENV_CLASSES)}."]}},
        )
    statuses = [s.strip().upper() for s in params.get("status", "").split(",") if s.strip()]
    unknown = [s for s in statuses if s not in Status.__members__]
    if unknown:
        raise InvalidInput(
            "unknown status", extra={"fields": {"status": [f"Unknown: {', '.join(unknown)}."]}}
        )
    return selectors.EnvironmentFilter(
        team=params.get("team", ""),
        status=",".join(statuses),
        env_class=env_class,
        requested_by=params.get("requested_by", ""),
        q=params.get("q", ""),
    )


class EnvironmentListCreateApi(APIView):
    """GET: visible environments (filters: team, status, env_class, requested_by, q; limit/offset).
    POST: submit a request; honours Idempotency-Key."""

    permission_classes = [HasKilnRole]

    @extend_schema(
        operation_id="environments_create",
        request=EnvironmentCreateInput,
        responses={
            201: OpenApiResponse(
                out.EnvironmentDetailOutput,
                description="Submitted (the policy gate may have DENIED it already).",
            ),
            200: OpenApiResponse(
                out.EnvironmentDetailOutput,
                description="The request submitted before with this Idempotency-Key.",
            ),
            **errors(409, 422),
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "maxLength": 200},
                OpenApiParameter.HEADER,
                description="Resubmitting the same body with the same key returns the first result.",
            ),
            out.LOCATION,
            out.REPLAYED,
        ],
    )
    def post(self, request: Request) -> Response:
        data = EnvironmentCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        env, created = services.environment_request_submit(
            actor=actor_from_request(request),
            data=data.validated_data,
            idempotency_key=request.headers.get("Idempotency-Key", "").strip(),
        )
        if env.request.requested_by_id == request.user.pk:  # the requester is the caller
            env.request.requested_by = request.user
        payload = out.environment_payload(env, detail=True, submitted=created)
        headers = {
            "Location": f"/api/v1/environments/{env.public_id}/",
            "ETag": conditional.etag_of(payload),
        }
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(
            payload,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers=headers,
        )

    @extend_schema(
        operation_id="environments_list",
        responses=out.EnvironmentPageOutput,
        parameters=out.LIST_PARAMETERS,
    )
    def get(self, request: Request) -> Response:
        qs = selectors.environment_list(
            viewer=actor_from_request(request), filters=_filters(request)
        )
        paginator = LimitOffsetPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response([out.environment_payload(env) for env in page])


class EnvironmentDetailApi(APIView):
    """GET: one environment. DELETE: request teardown (202)."""

    permission_classes = [HasKilnRole]

    @extend_schema(
        operation_id="environments_retrieve",
        responses={
            200: out.EnvironmentDetailOutput,
            304: OpenApiResponse(description="Not modified: If-None-Match names this version"),
        },
        parameters=out.WATCH_PARAMETERS,
    )
    def get(self, request: Request, public_id: str) -> Response:
        viewer = actor_from_request(request)
        env = selectors.environment_get(viewer=viewer, public_id=public_id)

        def wait_for_change(seconds: int) -> dict[str, Any]:
            changed = selectors.environment_wait_for_change(
                viewer=viewer, environment=env, seconds=seconds
            )
            return out.environment_payload(changed, detail=True)

        return conditional.answer(
            request, out.environment_payload(env, detail=True), wait_for_change=wait_for_change
        )

    @extend_schema(
        operation_id="environments_teardown",
        parameters=[OpenApiParameter("reason", {"type": "string", "maxLength": 2000})],
        responses={202: out.EnvironmentOutput, **errors(409)},
    )
    def delete(self, request: Request, public_id: str) -> Response:
        actor = actor_from_request(request)
        env = selectors.environment_get(viewer=actor, public_id=public_id)
        reason = request.query_params.get("reason", "") or "teardown requested over the API"
        env = services.environment_teardown_request(actor=actor, environment=env, reason=reason)
        return Response(out.environment_payload(env), status=status.HTTP_202_ACCEPTED)


class EnvironmentActionApi(APIView):
    """POST: a person's decision or change on one environment: validate the body, call its
    service, answer the environment's detail.

    Subclasses name the service and the InputSerializer (its fields are the service's keyword
    arguments besides the actor and the environment).
    """

    permission_classes = [HasKilnRole]
    InputSerializer: type[StrictSerializer]
    act: Callable[..., Environment]

    def post(self, request: Request, public_id: str) -> Response:
        actor = actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        env = selectors.environment_get(viewer=actor, public_id=public_id)
        env = type(self).act(actor=actor, environment=env, **data.validated_data)
        return Response(out.environment_payload(env, detail=True))


# What each action's POST does and who may: the view's docstring and its OpenAPI description.
ACTION_DOCS = {
    "approve": "approve a pending request (approvers; not one's own).",
    "reject": "reject a pending request with a reason (approvers; not one's own).",
    "extend": "push a READY environment's expiry out (team engineers).",
    "defer": (
        "hold teardown `minutes` past expiry for a reason, within the class's maximum deferral."
    ),
    "keep": "keep an environment proposed for early teardown as idle (team engineers).",
    "sleep": (
        "put a READY environment to sleep (its team's engineers): workloads, control plane and"
        " nodes to zero, volumes and database kept. 409 for another status or a class that may"
        " not sleep."
    ),
    "wake": (
        "wake a sleeping environment (its team's engineers); a no-op when it is awake, 409 when"
        " it is being torn down or failed."
    ),
}


def action_api(
    action: str, body: type[StrictSerializer], act: Callable[..., Environment]
) -> type[EnvironmentActionApi]:
    """The EnvironmentActionApi `Environment<Action>Api` for POST .../<action>/: `body` validated,
    `act` called, described by ACTION_DOCS and documented as operation `environments_<action>`
    (its body, the environment, or a 409)."""
    name = f"Environment{action.title()}Api"
    doc = f"POST: {ACTION_DOCS[action]}"
    view = type(
        name,
        (EnvironmentActionApi,),
        {"__doc__": doc, "InputSerializer": body, "act": staticmethod(act)},
    )
    schema = extend_schema(
        operation_id=f"environments_{action}",
        request=body,
        responses={200: out.EnvironmentDetailOutput, **errors(409)},
    )
    return extend_schema_view(post=schema)(view)


EnvironmentApproveApi = action_api("approve", ReasonInput, services.environment_approve)
EnvironmentRejectApi = action_api("reject", RejectInput, services.environment_reject)
EnvironmentExtendApi = action_api("extend", ExtendInput, services.environment_extend)


def _flag(value: str | None, name: str) -> bool:
    """A boolean query parameter: `true` or `false` (absent is false); anything else is a 400."""
    if value is None or value.lower() == "false":
        return False
    if value.lower() == "true":
        return True
    raise InvalidInput(f"{name} must be true or false", extra={"fields": {name: ["true or false"]}})


class EnvironmentEstimateApi(APIView):
    """GET: the cost estimate for a prospective request (query parameters as the create body)."""

    permission_classes = [HasKilnRole]

    @extend_schema(
        operation_id="environments_estimate",
        responses=out.EstimateOutput,
        parameters=out.ESTIMATE_PARAMETERS,
    )
    def get(self, request: Request) -> Response:
        p = request.query_params
        args: dict = {"env_class": p.get("env_class", "dev")}
        for field, default in (
            ("ttl_hours", "24"),
            ("cpu", "1"),
            ("memory_gib", "1"),
            ("gpu", "0"),
        ):
            text = p.get(field, default)
            # Not a whole number: passed on as text, so field_errors names the field with its rule.
            args[field] = int(text) if WHOLE_NUMBER.fullmatch(text) else text
        flags = {
            k: _flag(p.get(k), k) for k in ("spot_node_pool", "tenant_control_plane", "database")
        }
        errors = field_errors(
            {**args, **flags, "name": "x", "team": "x", "workload_class": "standard"}
        )
        if errors:
            raise InvalidInput("The request is invalid.", extra={"fields": errors})
        result = cost.estimate(
            spot=flags["spot_node_pool"],
            tenant_control_plane=flags["tenant_control_plane"],
            database=flags["database"],
            **args,
        )
        return Response(out.EstimateOutput(result).data)
