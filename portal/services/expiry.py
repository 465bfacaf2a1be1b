"""Expiry: the owner's verbs (extend, keep, defer) and the reaper's (ask the workloads, defer in
bounded steps, force at the hard deadline), together.

The rules are in `portal.disruption` (pure); here they meet the cluster (the workloads' annotations,
real HTTP checks), the database (deferral fields under the row lock) and the audit chain. Every
deferral is `portal.environment.teardown_deferred`, every forced disruption
`portal.environment.disruption_forced`, both counted in Prometheus.
"""

from __future__ import annotations

import urllib.error
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from prometheus_client import Counter

import audit
from kiln import outbound
from kiln.cluster.backends import get_backend
from kiln.errors import Forbidden, IllegalTransition, InvalidInput
from kiln.identity.permissions import Actor, can_act_on_environment, system_actor
from portal import compose as c
from portal import conf
from portal import disruption as d
from portal.lifecycle import Status, label
from portal.models import Environment
from portal.services.lifecycle import audit_target, environment_transition, environment_update
from portal.services.queueing import enqueue_teardown
from portal.words import lifetime_words

REAPER = "reaper"
DEFERRALS = Counter(
    "kiln_portal_teardown_deferrals_total",
    "Teardowns deferred past expiry, by class and who asked (workload or owner)",
    ["env_class", "source"],
)
FORCED = Counter(
    "kiln_portal_forced_disruptions_total",
    "Teardowns started at the hard deadline although a workload said not yet",
    ["env_class"],
)


# A terminate check is answered where it was asked, never somewhere a redirect points.
_OPENER = outbound.opener(allow_private=True)


def _words(env: Environment) -> str:
    """The environment's status as a refusal says it: "asleep", "teardown requested"."""
    return label(env.status, env.status_reason).lower()


def ask_workload(*, declaration: d.Declaration, namespace: str) -> d.Answer:
    """One workload's answer: a hold says not yet; a check is a real HTTP GET (2xx: ready)."""
    if declaration.error:
        return d.Answer(declaration.workload, ready=True, reason=declaration.error)
    if declaration.holds:
        return d.Answer(declaration.workload, ready=False, reason=declaration.hold_reason)
    url = d.check_url(
        conf.terminate_check_url(),
        service=declaration.workload.split("/", 1)[1],
        namespace=namespace,
        port=declaration.check_port,
        path=declaration.check_path,
    )
    try:
        with _OPENER.open(url, timeout=conf.http_timeout()) as response:
            return d.Answer(
                declaration.workload, ready=True, reason=f"{response.status} from {url}"
            )
    except urllib.error.HTTPError as exc:
        return d.Answer(
            declaration.workload,
            ready=False,
            reason=f"{exc.code} from {url}",
            retry_after=d.retry_after_seconds(exc.headers.get("Retry-After")),
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return d.Answer(declaration.workload, ready=False, reason=f"no answer from {url}: {exc}")


def workload_answers(*, environment: Environment) -> list[d.Answer]:
    """Ask every workload in the namespace that declares something (none declared: no answers)."""
    backend = get_backend()
    answers = []
    for api_version, kind in c.WORKLOAD_RESOURCES:
        for obj in backend.list(api_version, kind, environment.namespace, include_deleting=False):
            declaration = d.declaration_of(obj)
            if declaration is not None:
                answers.append(
                    ask_workload(declaration=declaration, namespace=environment.namespace)
                )
    return answers


def _answers_data(answers: list[d.Answer]) -> list[dict]:
    return [{"workload": a.workload, "ready": a.ready, "reason": a.reason} for a in answers]


def environment_expire(*, environment: Environment, now: datetime | None = None) -> str:
    """An expired READY environment: proceed, defer one step, or force; returns the verdict."""
    now = now or timezone.now()
    lifecycle = conf.class_lifecycle(environment.env_class)
    answers = workload_answers(environment=environment)  # HTTP outside any transaction
    reaper = system_actor(REAPER)
    with transaction.atomic():
        env = Environment.objects.select_for_update().get(pk=environment.pk)
        if env.status != Status.READY or env.expires_at is None or env.expires_at > now:
            return "noop"
        if env.deferred_until is not None and env.deferred_until > now:
            return "noop"  # an owner's deferral holds
        decision = d.decide(
            now=now, expires_at=env.expires_at, answers=answers, lifecycle=lifecycle
        )
        if decision.verdict == d.Verdict.DEFER:
            _record_deferral(
                env=env,
                actor=reaper,
                until=decision.until,
                reason="; ".join(f"{a.workload}: {a.reason}" for a in decision.refusing),
                data={"source": "workload", "answers": _answers_data(answers)},
                now=now,
            )
            verdict = d.Verdict.DEFER
        else:
            _start_expiry(env=env, actor=reaper, decision=decision, answers=answers)
            verdict = decision.verdict
    # Counted once the transaction has committed (a rolled-back deferral is not one).
    if verdict == d.Verdict.DEFER:
        DEFERRALS.labels(environment.env_class, "workload").inc()
    elif verdict == d.Verdict.FORCE:
        FORCED.labels(environment.env_class).inc()
    environment.refresh_from_db()
    return verdict.value


def _start_expiry(
    *, env: Environment, actor, decision: d.Decision, answers: list[d.Answer]
) -> None:
    """READY -> EXPIRING and queue teardown; a forced disruption is audited first."""
    data = {"answers": _answers_data(answers), "hard_deadline": decision.hard_deadline}
    if decision.verdict == d.Verdict.FORCE:
        audit.record(
            actor,
            "portal.environment.disruption_forced",
            audit_target(env),
            {
                "refusing": _answers_data(decision.refusing),
                "hard_deadline": decision.hard_deadline,
                "deferrals": env.deferrals,
            },
        )
    environment_transition(
        actor=actor,
        environment=env,
        to=Status.EXPIRING,
        reason=f"TTL expired at {env.expires_at.isoformat()}"
        + (" (hard deadline: forced)" if decision.verdict == d.Verdict.FORCE else ""),
        data=data,
    )
    enqueue_teardown(environment=env)


def _record_deferral(
    *, env: Environment, actor, until: datetime, reason: str, data: dict, now: datetime
) -> None:
    """Store and audit one deferral (the caller holds the row lock). A deferral is activity: the
    workload or its owner says the environment is in use, so an idle proposal is withdrawn."""
    previous = env.deferred_until
    env.deferred_until = until
    env.deferral_reason = reason[:2000]
    env.deferrals += 1
    env.last_activity_at, env.idle_proposed_at = now, None
    env.save(
        update_fields=[
            "deferred_until", "deferral_reason", "deferrals", "last_activity_at",
            "idle_proposed_at", "updated_at",
        ]
    )  # fmt: skip
    audit.record(
        actor,
        "portal.environment.teardown_deferred",
        audit_target(env),
        {
            "until": until,
            "previous": previous,
            "reason": reason,
            "deferrals": env.deferrals,
            **data,
        },
    )


def environment_defer_teardown(
    *, actor: Actor, environment: Environment, minutes: int, reason: str
) -> Environment:
    """An owner's do-not-disrupt: hold teardown `minutes` past expiry (or now), with a reason,
    never past the class's hard deadline. Bad input is a 400 and changes nothing."""
    if not can_act_on_environment(actor, environment.team.slug):
        raise Forbidden("only engineers of the owning team may defer this environment's teardown")
    reason = (reason or "").strip()
    fields: dict[str, list[str]] = {}
    if not reason:
        fields["reason"] = ["do-not-disrupt needs a reason."]
    if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes < 1:
        fields["minutes"] = ["A whole number of minutes, at least 1."]
    if fields:
        raise InvalidInput("The request is invalid.", extra={"fields": fields})
    with transaction.atomic():
        env = Environment.objects.select_for_update().get(pk=environment.pk)
        if env.status != Status.READY or env.expires_at is None:
            raise IllegalTransition(
                f"only a ready environment's teardown can be deferred (this one is {_words(env)})",
                extra={"from": env.status, "environment": env.public_id},
            )
        lifecycle = conf.class_lifecycle(env.env_class)
        deadline = d.hard_deadline(expires_at=env.expires_at, lifecycle=lifecycle)
        until = max(timezone.now(), env.expires_at) + timedelta(minutes=minutes)
        if until > deadline:
            limit = int(lifecycle.max_deferral // 60)
            raise InvalidInput(
                "The request is invalid.",
                extra={
                    "fields": {
                        "minutes": [
                            f"{env.env_class} teardown may be deferred at most {limit} minutes "
                            f"past expiry (until {deadline:%Y-%m-%d %H:%M} UTC)."
                        ]
                    }
                },
            )
        _record_deferral(
            env=env,
            actor=actor,
            until=until,
            reason=reason,
            data={"source": "owner", "minutes": minutes, "hard_deadline": deadline},
            now=timezone.now(),
        )
    DEFERRALS.labels(environment.env_class, "owner").inc()
    environment.refresh_from_db()
    return environment


def environment_extend(*, actor: Actor, environment: Environment, hours: int) -> Environment:
    """Push a READY environment's expiry out by `hours`, within its class's maximum lifetime."""
    if not can_act_on_environment(actor, environment.team.slug):
        raise Forbidden("only engineers of the owning team may extend this environment")
    if not isinstance(hours, int) or isinstance(hours, bool) or hours < 1:
        raise InvalidInput(
            "The request is invalid.",
            extra={"fields": {"hours": ["A whole number of hours, at least 1."]}},
        )
    with transaction.atomic():
        env = Environment.objects.select_for_update().get(pk=environment.pk)
        if env.status != Status.READY:
            raise IllegalTransition(
                f"only a ready environment can be extended (this one is {_words(env)})",
                extra={"from": env.status, "environment": env.public_id},
            )
        limit = conf.MAX_TTL_HOURS[env.env_class]
        lived = (env.expires_at - (env.ready_at or env.created_at)).total_seconds() / 3600
        left = max(0, int(limit - lived))
        if hours > left:  # before the arithmetic: any number of hours is refused in words
            more = f"this one can be extended by at most {left} h" if left else "this one cannot"
            raise InvalidInput(
                "The request is invalid.",
                extra={"fields": {"hours": [f"{lifetime_words(env.env_class, limit)}: {more}."]}},
            )
        new_expiry = env.expires_at + timedelta(hours=hours)
        environment_update(
            actor=actor,
            environment=env,
            action="extended",
            # An owner's extension is activity, and withdraws an idle proposal.
            updates={
                "expires_at": new_expiry,
                "last_activity_at": timezone.now(),
                "idle_proposed_at": None,
            },
            data={"hours": hours, "from": env.expires_at, "to": new_expiry},
        )
    environment.refresh_from_db()
    return environment


def environment_keep(*, actor: Actor, environment: Environment, reason: str = "") -> Environment:
    """The owner keeps an environment proposed as idle: the proposal is withdrawn, activity is now."""
    if not can_act_on_environment(actor, environment.team.slug):
        raise Forbidden("only engineers of the owning team may keep this environment")
    with transaction.atomic():
        env = Environment.objects.select_for_update().get(pk=environment.pk)
        if env.status not in (Status.READY, Status.SLEEPING):
            raise IllegalTransition(
                f"only a ready or sleeping environment can be kept (this one is {_words(env)})",
                extra={"from": env.status, "environment": env.public_id},
            )
        environment_update(
            actor=actor,
            environment=env,
            action="kept",
            updates={"idle_proposed_at": None, "last_activity_at": timezone.now()},
            data={"proposed_at": env.idle_proposed_at, "reason": reason},
        )
    environment.refresh_from_db()
    return environment


def environments_expire_due(*, now: datetime, dry_run: bool) -> dict[str, list[str]]:
    """Every expired READY environment whose deferral (if any) has run out: ask, defer or go."""
    due = Environment.objects.filter(status=Status.READY, expires_at__lte=now).exclude(
        deferred_until__gt=now
    )
    ids = [e.public_id for e in due.order_by("expires_at")]
    out: dict[str, list[str]] = {"expired": ids, "deferred": [], "forced": []}
    if dry_run:
        return out
    for env in due.select_related("team").order_by("expires_at"):
        verdict = environment_expire(environment=env, now=now)
        if verdict == d.Verdict.DEFER:
            out["deferred"].append(env.public_id)
        elif verdict == d.Verdict.FORCE:
            out["forced"].append(env.public_id)
    return out
