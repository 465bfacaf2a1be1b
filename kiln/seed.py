"""Demo data for standalone mode and `make dev`: teams, one person per role, and each app's own seed.

Idempotent: a second run changes nothing and records nothing. Apps add their
demo data (pricing, services) in `<app>/seed.py` with `seed_demo() -> list[str]`,
returning what they created.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

import audit
from kiln.identity.models import Membership, Team
from kiln.identity.permissions import (
    APPROVER,
    AUDITOR,
    ENGINEER,
    PLATFORM_ADMIN,
    ROLES,
    system_actor,
)

SEED_APPS = ("scheduler", "portal", "canary", "audit")


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str
    role: str
    team: str | None


TEAMS = (("payments", "Payments"), ("search", "Search"), ("data-platform", "Data platform"))
USERS = (
    DemoUser("alice", "alice-kiln-demo", ENGINEER, "payments"),
    DemoUser("bob", "bob-kiln-demo", ENGINEER, "search"),
    DemoUser("carol", "carol-kiln-demo", APPROVER, "payments"),
    DemoUser("dave", "dave-kiln-demo", APPROVER, "search"),
    DemoUser("erin", "erin-kiln-demo", AUDITOR, None),
    DemoUser("root", "root-kiln-demo", PLATFORM_ADMIN, None),
)


@transaction.atomic
def seed_demo() -> list[str]:
    """Create the demo teams, users and groups, then each app's demo data; return what was created."""
    created: list[str] = []
    for role in ROLES:
        _, made = Group.objects.get_or_create(name=role)
        if made:
            created.append(f"group {role}")
    teams = {}
    for slug, name in TEAMS:
        teams[slug], made = Team.objects.get_or_create(slug=slug, defaults={"name": name})
        if made:
            created.append(f"team {slug}")
    User = get_user_model()
    for demo in USERS:
        user = User.objects.filter(username=demo.username).first()
        if user is None:
            admin = demo.role == PLATFORM_ADMIN
            user = User.objects.create_user(
                demo.username,
                password=demo.password,
                is_staff=admin or demo.role == APPROVER,
                is_superuser=admin,
            )
            user.groups.add(Group.objects.get(name=demo.role))
            created.append(f"user {demo.username}")
        if demo.team and not Membership.objects.filter(user=user, team=teams[demo.team]).exists():
            Membership.objects.create(user=user, team=teams[demo.team])
            created.append(f"membership {demo.username}@{demo.team}")
    for app in SEED_APPS:
        try:
            module = importlib.import_module(f"{app}.seed")
        except ModuleNotFoundError as exc:
            if exc.name != f"{app}.seed":
                raise
            continue
        created.extend(module.seed_demo())
    if created:
        audit.record(system_actor("seed"), "kiln.demo.seeded", "kiln:demo", {"created": created})
    return created
