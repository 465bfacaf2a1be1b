"""The policy gate's Django side: build the request document, evaluate policy sets, store decisions."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Sum

from kiln.identity.permissions import Actor
from portal import conf, policy
from portal.lifecycle import LIVE
from portal.models import Environment, PolicyDecision

REQUEST_SET = "request"
MANIFEST_SET = "manifests"


def team_usage(*, team_slug: str) -> dict[str, int]:
    """CPU, memory, GPUs and count of the team's live environments."""
    agg = Environment.objects.filter(
        team__slug=team_slug, status__in=[s.value for s in LIVE]
    ).aggregate(
        cpu=Sum("request__cpu"),
        memory=Sum("request__memory_gib"),
        gpu=Sum("request__gpu"),
        n=Count("id"),
    )
    return {
        "cpu": agg["cpu"] or 0,
        "memoryGi": agg["memory"] or 0,
        "gpu": agg["gpu"] or 0,
        "environments": agg["n"] or 0,
    }


def request_document(*, actor: Actor, data: dict[str, Any]) -> dict[str, Any]:
    """The EnvironmentRequest object request policies see (status: the team's usage and limits)."""
    return {
        "apiVersion": "kiln.dev/v1alpha1",
        "kind": "EnvironmentRequest",
        "metadata": {
            "name": data["name"],
            "namespace": data["team"],
            "labels": {"kiln.dev/team": data["team"]},
        },
        "spec": {
            "team": data["team"],
            "name": data["name"],
            "envClass": data["env_class"],
            "ttlHours": data["ttl_hours"],
            "workloadClass": data["workload_class"],
            "resources": {"cpu": data["cpu"], "memoryGi": data["memory_gib"], "gpu": data["gpu"]},
            "components": {
                "namespace": True,
                "tenantControlPlane": data["tenant_control_plane"],
                "spotNodePool": data["spot_node_pool"],
                "database": data["database"],
            },
            "justification": data.get("justification", ""),
            "requester": {
                "username": actor.username,
                "roles": sorted(actor.roles),
                "teams": sorted(actor.teams),
            },
        },
        "status": {
            "teamUsage": team_usage(team_slug=data["team"]),
            "teamLimits": conf.team_limits(),
        },
    }


def _evaluate(*, set_name: str, objects: list[dict], context: dict[str, Any]) -> policy.Evaluation:
    try:
        policy_set = policy.load_policy_set(conf.policy_dir() / set_name, set_name)
    except policy.PolicySetMissing as exc:
        return policy.missing(set_name, str(exc))
    return policy.evaluate(
        policy_set, objects, context=context, timeout_seconds=conf.policy_timeout()
    )


def evaluate_request(*, actor: Actor, data: dict[str, Any]) -> policy.Evaluation:
    """Request policies over the request document (fail closed)."""
    context = {"userInfo": {"username": actor.username, "groups": sorted(actor.roles)}}
    return _evaluate(
        set_name=REQUEST_SET,
        objects=[request_document(actor=actor, data=data)],
        context=context,
    )


DRAFT_NAME = "draft"


def request_dry_run(*, actor: Actor, data: dict[str, Any]) -> policy.Evaluation:
    """The request policies over a draft request, nothing stored or audited: what submitting
    it now would be told (the same files and the same messages as `evaluate_request`). A draft
    without a usable name yet is checked under a placeholder name."""
    draft = {**data, "name": data.get("name") or DRAFT_NAME}
    draft["justification"] = draft.get("justification") or ""
    return evaluate_request(actor=actor, data=draft)


def evaluate_manifests(*, manifests: list[dict]) -> policy.Evaluation:
    """Manifest policies over every composed manifest (fail closed)."""
    return _evaluate(
        set_name=MANIFEST_SET, objects=manifests, context={"userInfo": {"username": "system:kiln"}}
    )


def planned_manifest_evaluation(*, environment: Environment) -> policy.Evaluation | None:
    """The manifest policies' evaluation stored with the plan at submission, when it still holds:
    every verdict allowed, under the manifest policy set in force now (same files, same hashes).
    The policies are pure functions of the stored manifests, so evaluating them again would give
    the same verdicts; None when it must run again (another policy set, or a denial)."""
    decisions = list(
        PolicyDecision.objects.filter(environment=environment, stage=PolicyDecision.MANIFEST)
    )
    if not decisions or not all(d.allowed for d in decisions):
        return None
    try:
        version = policy.load_policy_set(conf.policy_dir() / MANIFEST_SET, MANIFEST_SET).version
    except policy.PolicySetMissing:
        return None
    if any(d.policy_set_version != version for d in decisions):
        return None
    return policy.Evaluation(
        MANIFEST_SET,
        version,
        [
            policy.Verdict(d.policy, d.policy_sha256, d.target, d.allowed, d.outcome, d.message)
            for d in decisions
        ],
    )


def store_decisions(*, environment: Environment, stage: str, evaluation: policy.Evaluation) -> None:
    """Keep every verdict with its policy file's hash and the policy set version."""
    PolicyDecision.objects.bulk_create(
        [
            PolicyDecision(
                environment=environment,
                stage=stage,
                policy=v.policy[:200],
                policy_sha256=v.sha256,
                policy_set_version=evaluation.version,
                target=v.target[:300],
                allowed=v.allowed,
                outcome=v.outcome,
                message=v.message,
            )
            for v in evaluation.verdicts
        ]
    )


def decision_summary(*, evaluation: policy.Evaluation) -> dict[str, Any]:
    """What the audit event says about an evaluation."""
    return {
        "policy_set": evaluation.policy_set,
        "policy_version": evaluation.version,
        "allowed": evaluation.allowed,
        "denials": [
            {
                "policy": v.policy,
                "sha256": v.sha256,
                "outcome": v.outcome,
                "target": v.target,
                "message": v.message,
            }
            for v in evaluation.denials
        ],
        "checked": len(evaluation.verdicts),
    }
