"""Schemathesis fuzzes the whole API against the schema the app serves, once per role.

For an engineer, an approver, an auditor and a platform admin, every operation of
/api/schema/ is called with schema-conforming (positive) and schema-violating (negative)
data, from the coverage phase's boundary values and from bounded, derandomized Hypothesis
examples. Every check runs: no 5xx, every status, content type, header and body is one
the schema documents, invalid data is refused and the bearer token is not ignored. Any
failure fails the suite.

Requests go through Django's WSGI handler in this thread, so they run inside the test's
transaction: whatever a destructive call changes is rolled back with the test. Path
parameters are pinned to seeded objects (an environment pending approval, a rollout, a
chaos experiment, a team), so detail endpoints reach real rows, visible to each role.

`KILN_SCHEMATHESIS_SUMMARY=<file>` writes the per-role summary (operations, examples,
failures) as JSON.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
import uuid
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connections, transaction
from schemathesis.config import SchemathesisConfig

pytestmark = [pytest.mark.django_db]

# Examples per operation and generation mode in the fuzzing phase (the coverage phase adds
# its boundary cases). Deterministic: the same cases on every run.
MAX_EXAMPLES = int(os.environ.get("KILN_SCHEMATHESIS_MAX_EXAMPLES", "5"))

ROLES = {
    "engineer": {"sub": "erin", "roles": ("engineer",), "team": "payments"},
    "approver": {"sub": "carol", "roles": ("approver",), "team": "payments"},
    "auditor": {"sub": "audrey", "roles": ("auditor",), "team": None},
    "platform-admin": {"sub": "root", "roles": ("platform-admin",), "team": None},
}

SEED = 20261201
SCHEMA_PATH = "/api/schema/?format=json"
SUMMARY: dict[str, dict] = {}
DOCUMENT: dict[str, dict] = {}  # the served schema, fetched once per module


# --- the world the fuzzer meets ---------------------------------------------------------


@pytest.fixture
def fuzz_settings(settings, tmp_path: Path):
    """A private audit stream and key, the simulated cluster with no delays, no autorun."""
    tag = uuid.uuid4().hex[:10]
    settings.KILN_AUDIT_STREAM = f"kiln:audit:test:{tag}"
    settings.KILN_AUDIT_GROUP = f"writers-{tag}"
    settings.KILN_AUDIT_SIGNING_KEY = str(tmp_path / "audit" / "checkpoint-key.pem")
    settings.KILN_AUDIT_SIGNING_KEY_IS_DEV = True
    settings.KILN_AUDIT_ANCHORS = f"dir:{tmp_path / 'anchor'}"
    settings.KILN_AUDIT_RELAY_ON_COMMIT = False
    settings.KILN_DELIVERY_BACKEND = "simulated"
    settings.KILN_SIM_DELAY_PROFILE = "zero"
    settings.KILN_SIM_FINALIZER_SECONDS = 0.0
    settings.KILN_CHAOS_AUTORUN = False
    settings.KILN_GITOPS_REPO = str(tmp_path / "gitops.git")
    yield settings
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.REDIS_URL)
        client.delete(settings.KILN_AUDIT_STREAM)
        client.close()


def _cluster_objects() -> list[dict]:
    """Namespace `shop` of team payments with pods `app=web` and services web and checkout."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "shop", "labels": {"kiln.dev/team": "payments"}},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "web:1"}]},
        }
        for i in range(3)
    ]
    services = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        }
        for name in ("web", "checkout")
    ]
    return [namespace, *pods, *services]


@pytest.fixture
def world(fuzz_settings) -> dict[str, str]:
    """Teams, an environment pending approval, a canary service and rollout, a chaos
    experiment and a chained audit trail; returns the ids the path parameters use."""
    from django.contrib.auth import get_user_model

    from audit.chain.writer import AuditWriter
    from canary import services as canary_services
    from canary.chaos import services as chaos_services
    from kiln.cluster.backends import get_backend
    from kiln.identity.models import Membership, Team
    from kiln.identity.permissions import ENGINEER, Actor
    from portal.services import environment_request_submit

    payments = Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    user = get_user_model().objects.create_user("alice")
    Membership.objects.create(user=user, team=payments)
    alice = Actor(
        username="alice",
        roles=frozenset({ENGINEER}),
        teams=frozenset({"payments"}),
        user_id=user.pk,
    )
    get_backend().apply(_cluster_objects())
    pending, _ = environment_request_submit(
        actor=alice,
        data={
            "team": "payments",
            "name": "checkout",
            "env_class": "staging",
            "ttl_hours": 48,
            "workload_class": "standard",
            "cpu": 4,
            "memory_gib": 16,
            "gpu": 0,
            "tenant_control_plane": False,
            "spot_node_pool": False,
            "database": False,
            "justification": "load test",
        },
    )
    service = canary_services.service_create(
        actor=alice, team=payments, name="checkout", namespace="shop", metrics_source="push"
    )
    rollout = canary_services.rollout_create(
        actor=alice, service=service, baseline_version="v1", canary_version="v2"
    )
    experiment = chaos_services.experiment_create(
        actor=alice,
        data={
            "name": "abort web",
            "namespace": "shop",
            "selector": {"app": "web"},
            "service": "web",
            "fault": "http-abort",
            "abort_http_status": 503,
            "percent": 50.0,
            "duration_seconds": 60,
            "max_duration_seconds": 120,
            "max_pods": 2,
            "max_percent": 25.0,
            "stop_conditions": [],
        },
        start=False,
    )
    AuditWriter(block_ms=0).run_once()  # the events above, chained
    return {
        "public_id": pending.public_id,
        "rollout_id": str(rollout.pk),
        "experiment_id": str(experiment.pk),
        # None such: a recheck's body is checked before the injection is looked up (then 404).
        "injection_id": "1",
        "slug": "payments",
        "team": "payments",
    }


def _in_this_transaction(app: WSGIHandler):
    """The WSGI app on the test's own connection, each request in a savepoint of the test's
    transaction (a request that breaks its transaction cannot break the next one's).

    Schemathesis calls it from its worker thread; the test thread waits meanwhile, so the
    connection is shared the way Django's live server shares an in-memory database.
    """
    connection = connections["default"]

    def wsgi(environ, start_response):
        connections["default"] = connection
        with transaction.atomic():
            return list(app(environ, start_response))

    return wsgi


@pytest.fixture
def same_connection():
    """Keep Django from closing the test's connection between requests (as its test client
    does) and let Schemathesis' worker thread use it."""
    connection = connections["default"]
    connection.inc_thread_sharing()
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    # Thousands of expected 4xx: each would be a WARNING record; a 5xx is still logged.
    request_log = logging.getLogger("django.request")
    level = request_log.level
    request_log.setLevel(logging.ERROR)
    yield
    request_log.setLevel(level)
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
    connection.dec_thread_sharing()


@pytest.fixture
def wsgi_transport_fix(monkeypatch):
    """Schemathesis 4.32.5 hands socket-level keywords (`max_redirects`, `verify`, ...) to
    werkzeug when a check re-sends a request without a requests.Session (the `ignored_auth`
    check does), and werkzeug refuses them; in-process they mean nothing, so drop them."""
    from schemathesis.transport.wsgi import WSGITransport

    send = WSGITransport.send

    def patched(self, case, *, session=None, **kwargs):
        import requests

        if not isinstance(session, requests.Session):
            for name in ("max_redirects", "verify", "cert", "proxies"):
                kwargs.pop(name, None)
        return send(self, case, session=session, **kwargs)

    monkeypatch.setattr(WSGITransport, "send", patched)


# `positive_data_acceptance` expects schema-valid data to be accepted. These operations have
# rules JSON Schema cannot state, answered with a 400 that names the field and the reason:
RULES_BEYOND_THE_SCHEMA = {
    "environments_create": "the team must exist; TTL limit per environment class",
    "environments_estimate": "TTL limit per environment class",
    "canary_services_create": "namespace and host must be the team's; host forms",
    "rollouts_create": "steps strictly increasing to 100; AnalysisConfig values",
    "rollouts_observations_create": "errors <= requests, one latency sample per request at most",
    "chaos_experiment_create": "fields per fault kind; label key syntax; namespace ownership",
    "audit_events_list": "a cursor is only valid if Kiln issued it",
    "audit_export": "`from` before `to`",
    "audit_proof_inclusion": "`seq` within `size`, `size` within the tree",
    "audit_proof_consistency": "`from` not above `to`, `to` within the tree",
    "teams_members_create": "the user must exist",
    "teams_budget_update": "the currency is the platform's configured one",
    "teams_budget_raise": "a raise is more than 0",
    "teams_sleep_schedule_set": "an IANA time zone; windows' days and HH:MM times, a wake window",
}


def schemathesis_config(token: str, ids: dict[str, str]) -> SchemathesisConfig:
    """Every phase that needs no live links, every check, bounded and deterministic."""
    return SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "workers": 1,
            "cache": {"enabled": False},  # no state carried between runs (nor a .schemathesis/)
            "headers": {"Authorization": f"Bearer {token}"},
            "generation": {
                "mode": "all",  # positive and negative data
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
                # PostgreSQL cannot store NUL, so Kiln refuses it anywhere with a 400
                # (tests/kiln/test_bad_input.py); a schema could only say so with a pattern on
                # every string, so positive data leaves it out.
                "allow-x00": False,
            },
            "phases": {
                "examples": {"enabled": True},
                # Boundary values of every parameter, positive and negative, and methods the
                # schema does not list (each must be a 405 with an Allow header).
                "coverage": {
                    "enabled": True,
                    "unexpected-methods": ["PATCH"],
                    # A query parameter given twice is answered as once or refused, never a 500.
                    "generate-duplicate-query-parameters": True,
                },
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},  # its links need objects to outlive a request
            },
            "checks": {"enabled": True},
            "parameters": {f"path.{name}": value for name, value in ids.items()},
            "operations": [
                {
                    "include-operation-id": sorted(RULES_BEYOND_THE_SCHEMA),
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ["2xx", "400", "401", "403", "404", "409"]
                        }
                    },
                }
            ],
        }
    )


def served_schema(app, config: SchemathesisConfig):
    """The document the app serves at /api/schema/ (fetched from it once: generating it takes
    seconds), loaded for this role's run."""
    if "json" not in DOCUMENT:
        DOCUMENT["json"] = schemathesis.openapi.from_wsgi(SCHEMA_PATH, app).raw_schema
    schema = schemathesis.openapi.from_dict(DOCUMENT["json"], config=config)
    schema.app = app
    schema.location = SCHEMA_PATH
    return schema


def run(schema) -> dict:
    """Run every phase; the summary the CLI prints: operations, requests, failures."""
    from schemathesis.engine import Status, events

    operations: set[str] = set()
    requests = 0
    failures: list[dict] = []
    errors: list[str] = []
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            operations.add(recorder.label)
            requests += sum(1 for i in recorder.interactions.values() if i.response is not None)
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        interaction = recorder.interactions.get(case_id)
                        response = interaction.response if interaction else None
                        failures.append(
                            {
                                "operation": recorder.label,
                                "check": check.name,
                                "title": failure.title,
                                "message": failure.message[:500],
                                "status": response.status_code if response else None,
                                "body": response.content[:300].decode(errors="replace")
                                if response
                                else None,
                                "reproduce": check.failure_info.code_sample[:1500],
                            }
                        )
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.value!r}"[:500])
        elif isinstance(event, events.FatalError):
            raise event.exception
    return {
        "operations": sorted(operations),
        "requests": requests,
        "failures": failures,
        "errors": errors,
    }


@pytest.mark.parametrize("role", list(ROLES))
def test_every_operation_answers_what_its_schema_says(
    role, world, make_token, same_connection, wsgi_transport_fix
):
    who = ROLES[role]
    token = make_token(sub=who["sub"], roles=who["roles"], team=who["team"])
    app = _in_this_transaction(WSGIHandler())
    schema = served_schema(app, schemathesis_config(token, world))
    started = time.perf_counter()
    result = run(schema)
    result["seconds"] = round(time.perf_counter() - started, 1)
    SUMMARY[role] = result
    assert len(result["operations"]) == len(list(schema.get_all_operations()))
    assert result["requests"] > 0
    assert not result["errors"], result["errors"]
    assert not result["failures"], json.dumps(result["failures"], indent=2)


@pytest.fixture(scope="module", autouse=True)
def _summary():
    """Write the per-role summary when KILN_SCHEMATHESIS_SUMMARY names a file."""
    started = time.perf_counter()
    yield
    target = os.environ.get("KILN_SCHEMATHESIS_SUMMARY")
    if not target or not SUMMARY:
        return
    summary = {
        "command": "KILN_SCHEMATHESIS_SUMMARY=<file> python -m pytest tests/kiln/test_schemathesis.py",
        "schemathesis": version("schemathesis"),
        "max_examples": MAX_EXAMPLES,
        "seed": SEED,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "uname": " ".join(platform.uname()),
            "nproc": os.cpu_count(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "module_seconds": round(time.perf_counter() - started, 1),
        "roles": {
            role: {
                "operations": len(r["operations"]),
                "requests": r["requests"],
                "failures": len(r["failures"]),
                "errors": len(r["errors"]),
                "seconds": r["seconds"],
                "failed": r["failures"][:20],
                "error_details": r["errors"][:20],
            }
            for role, r in SUMMARY.items()
        },
    }
    Path(target).write_text(json.dumps(summary, indent=2) + "\n")
