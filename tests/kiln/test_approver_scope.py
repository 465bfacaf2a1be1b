"""The permission module scopes approvers to their teams; KILN_APPROVERS_GLOBAL is the one
explicit grant of a central change board; the querysets ask the same rule as the predicates."""

from __future__ import annotations

import pytest

from kiln.identity import permissions as p
from kiln.identity import visibility
from kiln.identity.permissions import APPROVER, AUDITOR, ENGINEER, PLATFORM_ADMIN, Actor

CAROL = Actor("carol", roles=frozenset({APPROVER}), teams=frozenset({"payments"}))
SAM = Actor("sam", roles=frozenset({APPROVER}), teams=frozenset({"search"}))
ERIN = Actor("erin", roles=frozenset({AUDITOR}))
ROOT = Actor("root", roles=frozenset({PLATFORM_ADMIN}))
ALICE = Actor("alice", roles=frozenset({ENGINEER}), teams=frozenset({"payments"}))


@pytest.mark.parametrize(
    ("actor", "acts", "sees"),
    [
        (CAROL, True, True),  # an approver of the team
        (SAM, False, False),  # an approver of another team
        (ERIN, False, True),  # an auditor sees, never approves
        (ROOT, True, True),  # a platform admin, everywhere
        (ALICE, False, True),  # an engineer of the team sees, never approves
    ],
    ids=["team-approver", "other-team-approver", "auditor", "platform-admin", "engineer"],
)
def test_who_approves_promotes_and_sees_payments(actor, acts, sees):
    assert p.can_approve(actor, "payments", "alice-the-requester") is acts
    assert p.can_promote_rollout(actor, "payments") is acts
    assert p.can_view_environment(actor, "payments") is sees
    assert p.can_view_rollout(actor, "payments") is sees


def test_the_change_board_grant_makes_approvers_act_for_every_team(settings):
    assert p.approval_basis(SAM, "payments") is None
    assert not visibility.scope(SAM, visibility.ENVIRONMENTS).every
    settings.KILN_APPROVERS_GLOBAL = True
    assert p.approval_basis(SAM, "payments") == p.AS_CHANGE_BOARD
    assert p.approval_basis(SAM, "search") == p.AS_MEMBER
    assert p.can_approve(SAM, "payments") and p.can_promote_rollout(SAM, "payments")
    assert visibility.scope(SAM, visibility.ENVIRONMENTS).every
    assert p.can_view_rollout(SAM, "payments")
    assert not p.can_approve(SAM, "payments", "sam")  # still never their own request
    assert not p.can_promote_rollout(ALICE, "search")  # the grant is the approvers' only


def test_the_default_is_no_central_change_board():
    from kiln.settings import identity

    assert identity.KILN_APPROVERS_GLOBAL is False


@pytest.mark.django_db
def test_querysets_and_predicates_agree(settings):
    from kiln.identity.models import Team

    Team.objects.create(slug="payments", name="Payments")
    Team.objects.create(slug="search", name="Search")
    teams = Team.objects.order_by("slug")
    for grant in (False, True):
        settings.KILN_APPROVERS_GLOBAL = grant
        for actor in (CAROL, SAM, ERIN, ROOT, ALICE):
            seen = set(
                visibility.restrict(
                    teams, actor, visibility.ENVIRONMENTS, team_field="slug"
                ).values_list("slug", flat=True)
            )
            assert seen == {t.slug for t in teams if p.can_view_environment(actor, t.slug)}
            queue = p.approver_teams_filter(teams, actor, team_field="slug")
            assert set(queue.values_list("slug", flat=True)) == {
                t.slug for t in teams if p.can_approve(actor, t.slug)
            }
