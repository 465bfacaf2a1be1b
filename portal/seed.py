"""Demo environments for standalone mode and `make dev`: one of each interesting state.

Idempotent: every request carries an Idempotency-Key, so a second run finds
them and creates nothing. Provisioning runs in the worker after the commit.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model

from kiln.identity.permissions import actor_for_user
from portal.services import environment_request_submit

DEMO_REQUESTS = (
    (
        "alice",
        {
            "team": "payments",
            "name": "checkout-preview",
            "env_class": "dev",
            "ttl_hours": 48,
            "workload_class": "standard",
            "cpu": 4,
            "memory_gib": 16,
            "gpu": 0,
            "tenant_control_plane": True,
            "spot_node_pool": False,
            "database": True,
            "justification": "preview of the new checkout flow",
        },
    ),
    (
        "alice",
        {
            "team": "payments",
            "name": "pr-1423",
            "env_class": "ephemeral",
            "ttl_hours": 8,
            "workload_class": "batch",
            "cpu": 2,
            "memory_gib": 4,
            "gpu": 0,
            "tenant_control_plane": False,
            "spot_node_pool": True,
            "database": False,
            "justification": "",
        },
    ),
    (
        "alice",
        {
            "team": "payments",
            "name": "ledger-staging",
            "env_class": "staging",
            "ttl_hours": 336,
            "workload_class": "latency-sensitive",
            "cpu": 16,
            "memory_gib": 64,
            "gpu": 0,
            "tenant_control_plane": True,
            "spot_node_pool": False,
            "database": True,
            "justification": "load test of the ledger before the quarter close",
        },
    ),
    (
        "bob",
        {
            "team": "search",
            "name": "ranker-prod",
            "env_class": "prod",
            "ttl_hours": 4320,
            "workload_class": "latency-sensitive",
            "cpu": 32,
            "memory_gib": 128,
            "gpu": 4,
            "tenant_control_plane": True,
            "spot_node_pool": False,
            "database": False,
            "justification": "production home of the new GPU ranking model",
        },
    ),
    (
        "bob",
        {
            "team": "search",
            "name": "spot-staging",
            "env_class": "staging",
            "ttl_hours": 72,
            "workload_class": "batch",
            "cpu": 8,
            "memory_gib": 32,
            "gpu": 0,
            "tenant_control_plane": False,
            "spot_node_pool": True,
            "database": False,
            "justification": "denied by policy: spot is for ephemeral and dev",
        },
    ),
)


def seed_demo() -> list[str]:
    """Submit the demo requests (auto-approved, pending, prod needing two approvers, denied)."""
    created: list[str] = []
    User = get_user_model()
    for username, data in DEMO_REQUESTS:
        user = User.objects.filter(username=username).first()
        if user is None:
            continue
        env, made = environment_request_submit(
            actor=actor_for_user(user), data=data, idempotency_key=f"demo-seed:{data['name']}"
        )
        if made:
            created.append(f"environment {env.namespace} ({env.status})")
    return created
