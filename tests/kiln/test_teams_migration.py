"""Teams and memberships moved from portal to kiln without losing a row or a foreign key.

The test takes the database back to the migrations before the move (portal 0004,
canary 0003, no kiln migration), writes teams, memberships and rows that point
at a team through the models of that time, migrates forward and finds every row
through today's models.
"""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import ProtectedError

from canary.models import Service
from kiln.identity.models import Membership, Team
from portal.models import Environment, EnvironmentRequest

BEFORE_MOVE = [
    ("portal", "0004_membership_source"),
    ("canary", "0003_rollout_inconclusive"),
    ("kiln", None),
]


def _migrate(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection)  # a fresh loader sees what is applied now


def _leaves() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def database_before_the_move(transactional_db):
    """The historical apps at the migrations before the move; the database goes forward again after."""
    executor = _migrate(BEFORE_MOVE)
    try:
        yield executor.loader.project_state(list(executor.loader.applied_migrations)).apps
    finally:
        _migrate(_leaves())


def _write_old_rows(old_apps) -> dict[str, int]:
    User = old_apps.get_model("auth", "User")
    OldTeam = old_apps.get_model("portal", "Team")
    OldMembership = old_apps.get_model("portal", "Membership")
    OldRequest = old_apps.get_model("portal", "EnvironmentRequest")
    OldEnvironment = old_apps.get_model("portal", "Environment")
    OldService = old_apps.get_model("canary", "Service")
    ContentType = old_apps.get_model("contenttypes", "ContentType")

    alice = User.objects.create(username="alice-before-move")
    bob = User.objects.create(username="bob-before-move")
    payments = OldTeam.objects.create(slug="payments-old", name="Payments")
    search = OldTeam.objects.create(slug="search-old", name="Search")
    claim = OldMembership.objects.create(user=alice, team=payments, source="claim")
    admin = OldMembership.objects.create(user=bob, team=search, source="admin")
    request = OldRequest.objects.create(
        team=payments, name="web", env_class="dev", ttl_hours=4, cpu=2, memory_gib=4,
        requested_by=alice,
    )
    environment = OldEnvironment.objects.create(
        public_id="env_beforemove", request=request, team=payments, name="web",
        namespace="payments-old-web", env_class="dev",
    )
    service = OldService.objects.create(
        team=search, name="checkout", namespace="search-old", host="checkout.search.svc"
    )
    team_type = ContentType.objects.get(app_label="portal", model="team")
    return {
        "alice": alice.pk, "bob": bob.pk, "payments": payments.pk, "search": search.pk,
        "claim": claim.pk, "admin": admin.pk, "request": request.pk,
        "environment": environment.pk, "service": service.pk, "team_type": team_type.pk,
    }


def test_teams_memberships_and_their_references_survive_the_move_to_kiln(
    database_before_the_move,
):
    ids = _write_old_rows(database_before_the_move)

    _migrate(_leaves())

    payments, search = Team.objects.get(pk=ids["payments"]), Team.objects.get(pk=ids["search"])
    assert (payments.slug, payments.name, search.slug) == ("payments-old", "Payments", "search-old")
    claim, admin = Membership.objects.get(pk=ids["claim"]), Membership.objects.get(pk=ids["admin"])
    assert (claim.user_id, claim.team_id, claim.source) == (ids["alice"], ids["payments"], "claim")
    assert (admin.user_id, admin.team_id, admin.source) == (ids["bob"], ids["search"], "admin")
    # The rows that point at a team still reach it, both ways round.
    assert EnvironmentRequest.objects.get(pk=ids["request"]).team == payments
    assert Environment.objects.get(pk=ids["environment"]).team == payments
    assert Service.objects.get(pk=ids["service"]).team == search
    assert list(payments.environment_requests.values_list("pk", flat=True)) == [ids["request"]]
    assert list(search.canary_services.values_list("pk", flat=True)) == [ids["service"]]
    assert sorted(search.memberships.values_list("user__username", flat=True)) == [
        "bob-before-move"
    ]
    # PROTECT still holds a referenced team, and the database still checks the key.
    with pytest.raises(ProtectedError):
        payments.delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(user_id=ids["alice"], team_id=ids["payments"])  # unique pair
    with pytest.raises(IntegrityError), transaction.atomic():
        EnvironmentRequest.objects.filter(pk=ids["request"]).update(team_id=10**9)
    # The content type followed the model, so admin history keeps pointing at it.
    assert ContentType.objects.get_for_model(Team).pk == ids["team_type"]


def test_the_moved_models_keep_their_tables():
    assert Team._meta.db_table == "portal_team"
    assert Membership._meta.db_table == "portal_membership"
    assert (Team._meta.app_label, Membership._meta.app_label) == ("kiln", "kiln")
