"""The environments API's typed response serializers (portal/api.py), which the OpenAPI
document types every field of the responses from; the plain functions that render an
environment in exactly that shape; and the query parameters and headers the views read.

An environment is rendered by `environment_payload`, a plain function, not by its serializer:
DRF builds a serializer's fields afresh for every instance and walks them per value, which cost
about 9 ms of CPU per detail answer against about 1 ms for the same dict written out
(`provision_bench` misses its p95 target on CPU; docs/benchmarks.md). tests/portal holds the
two to the same output, so the schema stays the truth. The estimate keeps its serializer.

They render and describe; they hold no rule. portal.validation and kiln.params enforce the
limits documented here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from kiln.openapi import PAGE_PARAMETERS, documented, paginated
from portal import conf, selectors
from portal.lifecycle import Status
from portal.models import Environment
from portal.validation import ENV_CLASSES, FIELDS, WORKLOAD_CLASSES

ENVIRONMENT_STATUSES = [s.value for s in Status]
STEP_STATUSES = ["pending", "running", "done", "failed"]
# Named in the schema (SPECTACULAR ENUM_NAME_OVERRIDES), not a bare "StageEnum" or "OutcomeEnum".
APPROVAL_DECISIONS = ["approve", "reject"]
POLICY_STAGES = ["request", "manifest"]
POLICY_OUTCOMES = ["allow", "deny", "error", "timeout", "missing"]
DECIMAL = {"type": "string", "format": "decimal", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"}


@extend_schema_serializer(component_name="EnvironmentRequestFields")
class EnvironmentRequestFieldsOutput(serializers.Serializer):
    """What was asked for (the request's fields but the team)."""

    name = serializers.CharField()
    env_class = serializers.ChoiceField(choices=ENV_CLASSES)
    ttl_hours = serializers.IntegerField(
        min_value=1, help_text="Hours from READY to expiry, as asked (extensions are not counted)."
    )
    workload_class = serializers.ChoiceField(choices=WORKLOAD_CLASSES)
    cpu = serializers.IntegerField(min_value=1, help_text="CPU cores of the namespace's quota.")
    memory_gib = serializers.IntegerField(min_value=1, help_text="GiB of the namespace's quota.")
    gpu = serializers.IntegerField(min_value=0)
    tenant_control_plane = serializers.BooleanField()
    spot_node_pool = serializers.BooleanField()
    database = serializers.BooleanField()
    justification = serializers.CharField(allow_blank=True)


@extend_schema_serializer(component_name="Environment")
class EnvironmentOutput(serializers.Serializer):
    """An environment as lists show it."""

    id = serializers.CharField(source="public_id", help_text="Opaque id, used in URLs.")
    team = serializers.CharField(source="team.slug")
    name = serializers.CharField()
    namespace = serializers.CharField()
    env_class = serializers.ChoiceField(choices=ENV_CLASSES)
    status = serializers.ChoiceField(choices=ENVIRONMENT_STATUSES)
    status_reason = serializers.CharField(allow_blank=True)
    policy_version = serializers.CharField(allow_blank=True)
    requested_by = serializers.CharField(source="request.requested_by.get_username")
    request = EnvironmentRequestFieldsOutput()
    hourly_cost = documented(serializers.CharField(), **DECIMAL, description="USD per hour")
    asleep_hourly_cost = documented(
        serializers.CharField(), **DECIMAL, description="USD per hour while asleep"
    )
    created_at = serializers.DateTimeField()
    ready_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    deleted_at = serializers.DateTimeField(allow_null=True)
    quarantine_owner = serializers.CharField(
        source="quarantine_owner.get_username", allow_null=True
    )


@extend_schema_serializer(component_name="EnvironmentApproval")
class ApprovalOutput(serializers.Serializer):
    """One approver's decision."""

    approver = serializers.CharField(source="approver_name")
    decision = serializers.ChoiceField(choices=APPROVAL_DECISIONS)
    reason = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField(source="created_at")
    on_behalf_of = serializers.CharField(
        source="environment.team.slug", help_text="The team this decision counts for."
    )
    place = serializers.SerializerMethodField(
        help_text="This approval's place among those the request needs (1 of `needed`); "
        "null for a rejection."
    )
    needed = serializers.SerializerMethodField(help_text="Distinct approvals the request needs.")

    @extend_schema_field({"type": "integer", "minimum": 1, "nullable": True})
    def get_place(self, decision: Any) -> int | None:
        return _tally_of(decision).place

    @extend_schema_field({"type": "integer", "minimum": 1})
    def get_needed(self, decision: Any) -> int:
        return _tally_of(decision).needed


def _tally_of(decision: Any) -> selectors.ApprovalCount:
    """The tally entry of one stored decision (its environment's decisions, in order)."""
    env = decision.environment
    ids = [d.pk for d in env.decisions.all()]
    return selectors.approval_tally(env)[ids.index(decision.pk)]


@extend_schema_serializer(component_name="EnvironmentPolicyDecision")
class PolicyDecisionOutput(serializers.Serializer):
    """One policy's verdict on the request or on one composed manifest."""

    stage = serializers.ChoiceField(choices=POLICY_STAGES)
    policy = serializers.CharField()
    policy_sha256 = serializers.CharField(allow_blank=True)
    policy_set_version = serializers.CharField(allow_blank=True)
    target = serializers.CharField(allow_blank=True)
    allowed = serializers.BooleanField()
    outcome = serializers.ChoiceField(choices=POLICY_OUTCOMES)
    message = serializers.CharField(allow_blank=True)


@extend_schema_serializer(component_name="EnvironmentStep")
class StepOutput(serializers.Serializer):
    """One provisioning or teardown step (listed in the order they run)."""

    name = serializers.CharField()
    status = serializers.ChoiceField(choices=STEP_STATUSES)
    attempts = serializers.IntegerField(min_value=0)
    detail = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="EnvironmentSleepState")
class SleepStateOutput(serializers.Serializer):
    """Its sleeping and waking: who put it to sleep last, since when it is asleep (null while
    awake or falling asleep), the wake asked for, and how long the last wake took."""

    trigger = serializers.CharField(
        source="sleep_trigger", allow_blank=True, help_text="owner, inactivity, schedule, budget"
    )
    slept_at = serializers.DateTimeField(allow_null=True)
    wake_requested_at = serializers.DateTimeField(allow_null=True)
    woke_at = serializers.DateTimeField(allow_null=True)
    last_wake_seconds = serializers.FloatField(allow_null=True)


@extend_schema_serializer(component_name="EnvironmentDetail")
class EnvironmentDetailOutput(EnvironmentOutput):
    """One environment with its approvals, policy decisions, steps and composed manifests."""

    sleep = SleepStateOutput(source="*")
    approvals = ApprovalOutput(many=True, source="decisions")
    policy_decisions = PolicyDecisionOutput(many=True)
    steps = StepOutput(many=True)
    manifests = serializers.ListField(
        child=serializers.DictField(child=serializers.JSONField()),
        help_text="The Kubernetes objects composed for it (empty until approved).",
    )


EnvironmentPageOutput = paginated(EnvironmentOutput, "EnvironmentPage")


@extend_schema_serializer(component_name="EstimateLine")
class EstimateLineOutput(serializers.Serializer):
    """One priced item of an estimate."""

    item = serializers.CharField()
    quantity = serializers.IntegerField(min_value=0)
    unit_price = documented(serializers.CharField(), **DECIMAL)
    hourly = documented(serializers.CharField(), **DECIMAL)


@extend_schema_serializer(component_name="Estimate")
class EstimateOutput(serializers.Serializer):
    """The cost of a prospective request, from the same prices the scheduler uses."""

    hourly = documented(serializers.CharField(), **DECIMAL)
    lifetime = documented(serializers.CharField(), **DECIMAL)
    ttl_hours = serializers.IntegerField(min_value=1)
    lines = EstimateLineOutput(many=True)
    asleep_hourly = documented(
        serializers.CharField(),
        **DECIMAL,
        description="USD per hour while asleep: what sleeping keeps (the database claim).",
    )
    source = serializers.CharField()
    currency = serializers.ChoiceField(choices=["USD"])


# --- an environment as a plain dict, in the serializers' shape -------------------------------


# Made once: a serializer field is costly to construct, and a detail writes up to a dozen times.
# Its time zone is read when it converts (the current one), so one instance serves every request.
_DATETIME = serializers.DateTimeField()


def _when(value: datetime | None) -> str | None:
    """A time as DRF's DateTimeField writes it: ISO 8601, UTC as `Z`."""
    if value is None:
        return None
    text = _DATETIME.enforce_timezone(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def environment_payload(
    env: Environment, *, detail: bool = False, submitted: bool = False
) -> dict[str, Any]:
    """An environment as `EnvironmentOutput` (or, with `detail`, `EnvironmentDetailOutput`)
    renders it: approvals, policy decisions, steps and manifests are the detail's.

    `submitted`: the environment was created by this request's transaction, which has committed;
    it is rendered as that transaction left it, with no approval (none can name a row no one saw)
    and no step (only the worker writes steps, once the transaction has committed), so neither
    is read again. A step the worker has started since shows in the next GET."""
    req = env.request
    owner = env.quarantine_owner
    body: dict[str, Any] = {
        "id": env.public_id,
        "team": env.team.slug,
        "name": env.name,
        "namespace": env.namespace,
        "env_class": env.env_class,
        "status": env.status,
        "status_reason": env.status_reason,
        "policy_version": env.policy_version,
        "requested_by": req.requested_by.get_username(),
        "request": {k: getattr(req, k) for k in FIELDS if k != "team"},
        "hourly_cost": str(env.hourly_cost),
        "asleep_hourly_cost": str(env.asleep_hourly_cost),
        "created_at": _when(env.created_at),
        "ready_at": _when(env.ready_at),
        "expires_at": _when(env.expires_at),
        "deleted_at": _when(env.deleted_at),
        "quarantine_owner": owner.get_username() if owner is not None else None,
    }
    if not detail:
        return body
    decisions = [] if submitted else list(env.decisions.all())
    tally = selectors.approval_tally(env, decisions)
    body["approvals"] = [
        {
            "approver": d.approver_name,
            "decision": d.decision,
            "reason": d.reason,
            "at": _when(d.created_at),
            "on_behalf_of": t.team,
            "place": t.place,
            "needed": t.needed,
        }
        for d, t in zip(decisions, tally, strict=True)
    ]
    body["policy_decisions"] = [
        {
            "stage": d.stage,
            "policy": d.policy,
            "policy_sha256": d.policy_sha256,
            "policy_set_version": d.policy_set_version,
            "target": d.target,
            "allowed": d.allowed,
            "outcome": d.outcome,
            "message": d.message,
        }
        for d in env.policy_decisions.all()
    ]
    body["steps"] = [
        {
            "name": s.name,
            "status": s.status,
            "attempts": s.attempts,
            "detail": s.detail,
            "started_at": _when(s.started_at),
            "finished_at": _when(s.finished_at),
        }
        for s in ([] if submitted else selectors.environment_steps(env))
    ]
    body["manifests"] = list(env.manifests)
    body["sleep"] = {
        "trigger": env.sleep_trigger,
        "slept_at": _when(env.slept_at),
        "wake_requested_at": _when(env.wake_requested_at),
        "woke_at": _when(env.woke_at),
        "last_wake_seconds": env.last_wake_seconds,
    }
    return body


# --- parameters and headers ----------------------------------------------------------------

WATCH_PARAMETERS = [
    OpenApiParameter(
        "If-None-Match",
        str,
        OpenApiParameter.HEADER,
        description="The ETag of the version the client holds: 304 while it is current.",
    ),
    OpenApiParameter(
        "Prefer",
        str,
        OpenApiParameter.HEADER,
        description="`wait=N` with If-None-Match: answer when the environment changes (a status "
        "change at once, others within a second), or after N seconds (at most 30) with 304.",
    ),
]

LIST_PARAMETERS = [
    OpenApiParameter("team", str, description="Team slug."),
    OpenApiParameter(
        "status",
        {"type": "array", "items": {"type": "string", "enum": ENVIRONMENT_STATUSES}},
        explode=False,
        description="Comma-separated statuses.",
    ),
    OpenApiParameter("env_class", str, enum=ENV_CLASSES),
    OpenApiParameter("requested_by", str, description="User name."),
    OpenApiParameter("q", str, description="Part of the name or namespace."),
    *PAGE_PARAMETERS,
]

ESTIMATE_PARAMETERS = [
    OpenApiParameter("env_class", str, enum=ENV_CLASSES, default="dev"),
    *(
        OpenApiParameter(
            name, {"type": "integer", "minimum": low, "maximum": high}, default=default
        )
        for name, low, high, default in (
            ("ttl_hours", 1, max(conf.MAX_TTL_HOURS.values()), 24),
            ("cpu", 1, conf.MAX_CPU, 1),
            ("memory_gib", 1, conf.MAX_MEMORY_GIB, 1),
            ("gpu", 0, conf.MAX_GPU, 0),
        )
    ),
    *(
        OpenApiParameter(name, bool, default=False)
        for name in ("spot_node_pool", "tenant_control_plane", "database")
    ),
]

LOCATION = OpenApiParameter(
    "Location",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description="The environment's URL.",
    response=[200, 201],
)
REPLAYED = OpenApiParameter(
    "Idempotent-Replayed",
    str,
    OpenApiParameter.HEADER,
    required=True,
    enum=["true"],
    response=[200],
    description="Present when the answer is a replay.",
)
