"""Tenant audit evidence: the per-environment sink token, the sink itself (an EventList in, an
append-only archive row per new event, one chained audit event per accepted batch), and the
archive read back and verified, also after the environment is gone. Hashing and validation:
portal/tenant_audit.py.

The tenant's own requests in a batch are its activity: the environment's `last_activity_at`
moves to the latest of them (and an idle proposal made before it is withdrawn), recorded in
the batch's audit event; a sleeping environment's tenant at work wakes it (`trigger: kubectl`). Kiln's own requests (its user agent) and the control plane's do not
count (`tenant_audit.is_tenant_activity`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets

from django.db import transaction
from django.utils import timezone

import audit
from audit.models import ChainEvent
from kiln.cluster.base import USER_AGENT
from kiln.cluster.simulated_tenant import http_transport
from kiln.errors import Forbidden, InvalidInput, KilnError, NotAuthenticated
from kiln.identity.permissions import system_actor
from portal import conf
from portal import tenant_audit as ta
from portal.lifecycle import Status
from portal.models import Environment, TenantAuditEvent, TenantAuditToken
from portal.services import sleep
from portal.services.lifecycle import audit_target

SINK = "tenant-audit-sink"
logger = logging.getLogger("kiln.portal.tenant_audit")
ARCHIVED = "portal.environment.tenant_audit_archived"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_sink_token() -> str:
    """A fresh random sink token (not stored: `tenant_audit_token_store` keeps its hash)."""
    return secrets.token_urlsafe(32)


def tenant_audit_token_store(*, environment: Environment, token: str) -> None:
    """Make `token` the environment's sink token, replacing any earlier one; only its hash is kept."""
    TenantAuditToken.objects.update_or_create(
        environment=environment, defaults={"token_sha256": _digest(token)}
    )


def tenant_audit_token_issue(*, environment: Environment) -> str:
    """A fresh sink token for the environment (replacing any earlier one); only its hash is kept."""
    token = new_sink_token()
    tenant_audit_token_store(environment=environment, token=token)
    return token


def sink_token_issued(*, environment: Environment) -> bool:
    """True if a tenant API server may post for the environment (it was given a sink token)."""
    return TenantAuditToken.objects.filter(environment=environment).exists()


def _authenticated(*, environment_id: str, token: str) -> Environment:
    """The environment the sink URL names, if the token is that environment's."""
    if not token:
        raise NotAuthenticated("a bearer token is required")
    row = TenantAuditToken.objects.filter(token_sha256=_digest(token)).first()
    if row is None:
        raise NotAuthenticated("the token is not a tenant audit sink token")
    env = Environment.objects.filter(public_id=environment_id).first()
    if env is None or not hmac.compare_digest(str(row.environment_id), str(env.pk)):
        raise Forbidden("the token is not this environment's")
    return env


def tenant_audit_ingest(*, environment_id: str, token: str, body: bytes) -> dict:
    """Archive an EventList a tenant API server posted: new events appended (an auditID already
    archived is skipped, so a retried batch stores nothing twice), one chained audit event per
    batch with its count and running hash. Bad input or a wrong token changes nothing."""
    env = _authenticated(environment_id=environment_id, token=token)
    try:
        items = ta.parse_event_list(body)
    except ta.TenantAuditInvalid as exc:
        raise InvalidInput(f"not an audit EventList: {exc}") from None
    with transaction.atomic():
        Environment.objects.select_for_update().filter(pk=env.pk).first()  # one writer per archive
        ids = [e["auditID"] for e in items]
        seen = set(
            TenantAuditEvent.objects.filter(environment=env, audit_id__in=ids).values_list(
                "audit_id", flat=True
            )
        )
        last = TenantAuditEvent.objects.filter(environment=env).order_by("-seq").first()
        seq, running = (last.seq, last.running_sha256) if last else (0, ta.GENESIS)
        rows = []
        for event in items:
            if event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            digest = ta.event_sha256(event)
            seq, running = seq + 1, ta.running_sha256(running, digest)
            rows.append(
                TenantAuditEvent(
                    environment=env,
                    seq=seq,
                    audit_id=event["auditID"],
                    event=event,
                    event_sha256=digest,
                    running_sha256=running,
                )
            )
        if rows:
            TenantAuditEvent.objects.bulk_create(rows)
            audit.record(
                system_actor(SINK),
                ARCHIVED,
                audit_target(env),
                {
                    "count": len(rows),
                    "first_seq": rows[0].seq,
                    "last_seq": seq,
                    "running_sha256": running,
                    **_tenant_activity(env, [r.event for r in rows]),
                },
            )
    return {"accepted": len(rows), "duplicates": len(items) - len(rows), "running_sha256": running}


def _tenant_activity(env: Environment, events: list[dict]) -> dict:
    """Move the environment's last activity to the tenant's latest in `events`, withdrawing an
    idle proposal made before it; what changed, for the batch's audit event ({} if nothing)."""
    activity = ta.latest_activity(events, own_user_agent=USER_AGENT, now=timezone.now())
    env.refresh_from_db(fields=["status", "last_activity_at", "idle_proposed_at"])
    if activity is None or (env.last_activity_at and activity <= env.last_activity_at):
        return {}
    updates = {"last_activity_at": activity, "updated_at": timezone.now()}
    withdrawn = (
        env.status == Status.READY
        and env.idle_proposed_at is not None
        and env.idle_proposed_at < activity
    )
    if withdrawn:
        updates["idle_proposed_at"] = None
    Environment.objects.filter(pk=env.pk).update(**updates)
    woken = env.status == Status.SLEEPING
    if woken:  # a request to a sleeping tenant's API server: use, so it wakes
        transaction.on_commit(lambda: _wake_on_use(env.pk))
    return {
        "tenant_activity_at": activity,
        "idle_proposal_withdrawn": withdrawn,
        **({"wakes": True} if woken else {}),
    }


def _wake_on_use(environment_id: int) -> None:
    """Wake an environment whose tenant was at work while it slept (after the batch commits)."""
    env = Environment.objects.select_related("team").filter(pk=environment_id).first()
    if env is None or env.status != Status.SLEEPING:
        return
    try:
        sleep.wake_environment(
            env,
            actor=system_actor(sleep.SLEEPER),
            reason="a request reached its sleeping API server",
            trigger=sleep.KUBECTL,
        )
    except KilnError as exc:  # it left SLEEPING meanwhile: nothing to wake
        logger.info("wake on use of %s passed over: %s", env.public_id, exc.message)


def tenant_audit_deliver(url: str, token: str, body: bytes) -> None:
    """How this process's simulated tenant API servers send a batch: one for Kiln's own sink
    (KILN_TENANT_AUDIT_SINK) goes to the service the HTTP view calls; any other URL over HTTP."""
    base = conf.tenant_audit_sink().rstrip("/") + "/"
    if not url.startswith(base):
        http_transport(url, token, body)
        return
    tenant_audit_ingest(environment_id=url[len(base) :].strip("/"), token=token, body=body)


def _anchors(env: Environment) -> list[dict]:
    """The archive hashes Kiln's audit chain holds for the environment, oldest first."""
    rows = ChainEvent.objects.filter(action=ARCHIVED, target=audit_target(env)).order_by("seq")
    return [json.loads(r.data) for r in rows]


def tenant_audit_export(*, environment: Environment) -> dict:
    """An environment's archive (every event in order with its hashes), the hashes the chain
    holds for it and what verification found: readable whatever the environment's status."""
    rows = list(TenantAuditEvent.objects.filter(environment=environment).order_by("seq"))
    anchors = _anchors(environment)
    problems = ta.verify_archive(
        [ta.ArchivedEvent(r.seq, r.event, r.event_sha256, r.running_sha256) for r in rows], anchors
    )
    return {
        "environment": environment.public_id,
        "namespace": environment.namespace,
        "status": environment.status,
        "events": [
            {
                "seq": r.seq,
                "event": r.event,
                "event_sha256": r.event_sha256,
                "running_sha256": r.running_sha256,
            }
            for r in rows
        ],
        "chained_batches": anchors,
        "verified": not problems,
        "problems": problems,
    }


def deletions_unacknowledged(
    *, environment: Environment, objects: list[tuple[str, str, str]]
) -> list[tuple[str, str, str]]:
    """Which (resource, namespace, name) deletions ("" for a cluster-scoped object's namespace)
    the archive holds no completed `delete` event for."""
    done = {
        (
            (e.get("objectRef") or {}).get("resource"),
            (e.get("objectRef") or {}).get("namespace") or "",
            (e.get("objectRef") or {}).get("name"),
        )
        for e in TenantAuditEvent.objects.filter(
            environment=environment,
            event__verb="delete",
            event__stage="ResponseComplete",
        ).values_list("event", flat=True)
    }
    return [o for o in objects if o not in done]
