"""The plan an approver sees before approving: what will be created, as the exact text delivery
commits, a diff against the previous version of this environment, the manifest policies'
verdicts and the cost.

The plan is made once, when the request is submitted: the manifests are composed then (the
datastore pool is already reserved), stored on the environment, and provisioning delivers
those stored manifests instead of composing again. Each manifest's text is
`kiln.cluster.gitops.manifest_file_text`, the function the gitops backend writes files with,
so the plan's bytes are what is committed and `Plan.sha256` is the SHA-256 of those bytes in
apply order. What provisioning writes besides them, outside Git (a tenant control plane's sink
token Secret and the flow control inside its API server), is listed apart in `Plan.outside`.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import QuerySet

import audit
from kiln.cluster import ref_of
from kiln.cluster.gitops import GitOpsBackend, manifest_file_text
from portal import compose as c
from portal.models import Environment, PolicyDecision
from portal.services import gate
from portal.services.lifecycle import audit_target
from portal.services.provisioning import environment_spec

SEPARATOR = "---\n"


@dataclass
class Plan:
    """What approving an environment will create, and what is known about it."""

    environment: Environment
    files: list[tuple[str, str]]  # (committed file name, exact text), in apply order
    previous: Environment | None
    diff: str
    verdicts: list[PolicyDecision] = field(default_factory=list)
    hourly_cost: Decimal = Decimal(0)
    total_cost: Decimal = Decimal(0)
    outside: list[tuple[str, str]] = field(default_factory=list)  # (what and where, text)

    @property
    def text(self) -> str:
        """Every manifest's committed text, as YAML documents in apply order."""
        return plan_text(self.environment.manifests)

    @property
    def sha256(self) -> str:
        """SHA-256 of `text`: equal to that of what delivery receives and commits."""
        return plan_sha256(self.environment.manifests)

    @property
    def denials(self) -> list[PolicyDecision]:
        """The verdicts that would stop provisioning."""
        return [v for v in self.verdicts if not v.allowed]


def plan_text(manifests: list[dict]) -> str:
    """The manifests as the gitops backend writes them, one YAML document each, in order."""
    return "".join(SEPARATOR + manifest_file_text(m) for m in manifests)


def plan_sha256(manifests: list[dict]) -> str:
    """SHA-256 (hex) of `plan_text(manifests)`."""
    return hashlib.sha256(plan_text(manifests).encode()).hexdigest()


def earlier_versions(env: Environment) -> QuerySet[Environment]:
    """The team's earlier environments of the same name that had manifests, latest first (read
    through the index on team, name and creation: a team's history can be long)."""
    return (
        Environment.objects.filter(team=env.team, name=env.name, created_at__lte=env.created_at)
        .exclude(pk=env.pk)
        .exclude(manifests=[])
        .order_by("-created_at", "-id")
    )


def _previous(env: Environment) -> Environment | None:
    """The last earlier environment of the same team and name that had manifests."""
    return earlier_versions(env).first()


def environment_plan_make(*, actor, environment: Environment) -> str:
    """Compose the environment's manifests, check them against the manifest policies, store
    both and audit the plan's hash; returns the hash ("" when the request cannot be composed,
    which provisioning then reports). Call inside the submitting transaction."""
    try:
        manifests = c.compose(environment_spec(environment=environment))
    except c.CompositionError:
        return ""
    evaluation = gate.evaluate_manifests(manifests=manifests)
    Environment.objects.filter(pk=environment.pk).update(manifests=manifests)
    environment.manifests = manifests
    gate.store_decisions(
        environment=environment, stage=PolicyDecision.MANIFEST, evaluation=evaluation
    )
    digest = plan_sha256(manifests)
    previous = _previous(environment)
    audit.record(
        actor,
        "portal.environment.planned",
        audit_target(environment),
        {
            "plan_sha256": digest,
            "objects": len(manifests),
            "previous": previous.public_id if previous else None,
            "policy": gate.decision_summary(evaluation=evaluation),
        },
    )
    return digest


def outside_the_plan(*, environment: Environment) -> list[tuple[str, str]]:
    """What provisioning also writes, never committed: (the object and where, its text); the
    sink token's value is made at provisioning and never shown."""
    if not environment.request.tenant_control_plane:
        return []
    spec = environment_spec(environment=environment)
    secret = c.audit_token_secret_name(spec)
    out = [
        (
            f"v1 Secret {spec.namespace}/{secret}, in the cluster",
            f"key {c.TOKEN_KEY}: the tenant audit sink's bearer token, a fresh random value "
            "written at provisioning; Kiln keeps only its SHA-256\n",
        )
    ]
    out += [
        (f"{ref_of(m)}, inside the tenant's API server", manifest_file_text(m))
        for m in c.tenant_flow_control(spec)
    ]
    return out


def environment_plan(*, environment: Environment) -> Plan:
    """The plan of an environment, read back from what was stored when it was submitted."""
    env = environment
    previous = _previous(env)
    before = plan_text(previous.manifests).splitlines(keepends=True) if previous else []
    diff = "".join(
        difflib.unified_diff(
            before,
            plan_text(env.manifests).splitlines(keepends=True),
            fromfile=previous.public_id if previous else "nothing",
            tofile=env.public_id,
        )
    )
    hours = Decimal(env.request.ttl_hours)
    return Plan(
        environment=env,
        files=[(GitOpsBackend.file_name(ref_of(m)), manifest_file_text(m)) for m in env.manifests],
        previous=previous,
        diff=diff,
        verdicts=list(env.policy_decisions.filter(stage=PolicyDecision.MANIFEST)),
        hourly_cost=env.hourly_cost,
        total_cost=(env.hourly_cost * hours).quantize(Decimal("0.01")),
        outside=outside_the_plan(environment=env),
    )
