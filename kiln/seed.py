"""Demo data for standalone mode and `make dev`: teams, one person per role, and each app's own seed.

Idempotent: a second run changes nothing and records nothing. Apps add their
demo data (pricing, services) in `<app>/seed.py` with `seed_demo() -> list[str]`,
returning what they created; kiln finds them through django.apps (`app_seeds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils.module_loading import module_has_submodule

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
    # Approvers act for their own teams, and prod needs two: search's second approver.
    DemoUser("frank", "frank-kiln-demo", APPROVER, "search"),
    DemoUser("erin", "erin-kiln-demo", AUDITOR, None),
    DemoUser("root", "root-kiln-demo", PLATFORM_ADMIN, None),
)


def seed_demo() -> list[str]:
    """Create the demo teams, users and groups, then each app's demo data; return what was created.

    The people are made in one transaction; each app's seed runs outside it, as its services
    open their own, and some ask the cluster (who owns a namespace), which no open transaction
    may wait on. Each seed skips what exists, so a second run adds nothing.
    """
    with transaction.atomic():
        created = _seed_people()
    for app_seed in app_seeds():
        created.extend(app_seed())
    if created:
        with transaction.atomic():
            audit.record(
                system_actor("seed"), "kiln.demo.seeded", "kiln:demo", {"created": created}
            )
    return created


def _seed_people() -> list[str]:
    """The demo's groups, teams, users and memberships: what was created."""
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
    return created


def app_seeds() -> list[Callable[[], list[str]]]:
    """Each installed app's `<app>.seed.seed_demo`, in INSTALLED_APPS order (kiln's own is above).

    Discovered by app label through django.apps, as the admin discovers `admin`
    modules, so kiln imports no app; an app whose seed needs another's data is
    listed after it in INSTALLED_APPS (scheduler's prices before portal's cost estimates).
    """
    seeds = []
    for config in apps.get_app_configs():
        if config.name == "kiln" or not module_has_submodule(config.module, "seed"):
            continue
        seeds.append(import_module(f"{config.name}.seed").seed_demo)
    return seeds
