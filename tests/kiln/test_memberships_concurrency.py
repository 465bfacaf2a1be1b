"""Two authentications with different claims at the same moment: no IntegrityError, never both teams."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from audit.models import OutboxEvent
from kiln.identity import services
from kiln.identity.models import Membership, Team

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 15


def claims(sub: str, team: str | None) -> dict:
    found = {"sub": sub, "iss": "https://kiln.test"}
    if team:
        found["team"] = team
    return found


def authenticate_at_once(*claim_sets: dict) -> list[BaseException]:
    """Run user_from_claims for each claim set in its own thread (own connection), released together."""
    barrier = threading.Barrier(len(claim_sets))
    errors: list[BaseException] = []

    def run(c: dict) -> None:
        try:
            barrier.wait(timeout=10)
            services.user_from_claims(claims=c)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(c,)) for c in claim_sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return errors


def claim_teams(username: str) -> set[str]:
    return set(
        Membership.objects.filter(user__username=username, source=Membership.CLAIM).values_list(
            "team__slug", flat=True
        )
    )


@pytest.fixture
def teams():
    return [Team.objects.create(slug=s, name=s.title()) for s in ("payments", "search", "data")]


def test_different_claims_at_once_leave_exactly_one_of_them(teams):
    get_user_model().objects.create(username="mover")
    for i in range(ROUNDS):
        first, second = ("payments", "search") if i % 2 else ("search", "data")
        errors = authenticate_at_once(claims("mover", first), claims("mover", second))
        assert errors == []
        assert claim_teams("mover") in ({first}, {second}), f"round {i}"
    # every change is on record, and the record replays to the final state
    held: set[str] = set()
    for event in OutboxEvent.objects.filter(action__startswith="kiln.membership.").order_by("id"):
        if event.action == "kiln.membership.created":
            assert event.data["team"] not in held
            held.add(event.data["team"])
        else:
            held.remove(event.data["team"])
    assert held == claim_teams("mover")


def test_first_sight_from_two_requests_at_once_creates_one_user_and_one_membership(teams):
    for i in range(ROUNDS):
        sub = f"newcomer-{i}"
        errors = authenticate_at_once(claims(sub, "payments"), claims(sub, "payments"))
        assert errors == []
        assert get_user_model().objects.filter(username=sub).count() == 1
        assert claim_teams(sub) == {"payments"}
        created = OutboxEvent.objects.filter(
            action="kiln.membership.created", data__user=sub, data__team="payments"
        )
        assert created.count() == 1


def test_a_team_claim_and_no_claim_at_once_settle_on_one_answer(teams):
    get_user_model().objects.create(username="mover")
    for i in range(ROUNDS):
        errors = authenticate_at_once(claims("mover", "payments"), claims("mover", None))
        assert errors == []
        assert claim_teams("mover") in (set(), {"payments"}), f"round {i}"
