"""Django admin actions: approve through the service, reject only with a reason."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from kiln.identity.models import Membership, Team
from portal.models import ApprovalDecision, Environment, TeamWebhook
from portal.services import environment_request_submit
from tests.portal.conftest import request_data

pytestmark = pytest.mark.django_db
URL = "/admin/portal/environment/"


def staff(username: str, role: str, team: str | None = None) -> Client:
    user = get_user_model().objects.create_user(username, is_staff=True)
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    if team:
        Membership.objects.create(user=user, team=Team.objects.get(slug=team))
    client = Client()
    client.force_login(user)
    return client


def test_approve_action_calls_the_service(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    client = staff("zoe", "approver", "payments")
    response = client.post(
        URL, {"action": "approve_selected", "_selected_action": [env.pk]}, follow=True
    )
    assert response.status_code == 200 and "Recorded 1 approval." in response.content.decode()
    env.refresh_from_db()
    assert env.status != "PENDING_APPROVAL"
    assert ApprovalDecision.objects.get().approver_name == "zoe"


def test_an_approval_refused_in_admin_says_why_naming_the_request_once(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    client = staff("zoe", "approver", "payments")
    client.post(URL, {"action": "approve_selected", "_selected_action": [env.pk]})
    again = client.post(
        URL, {"action": "approve_selected", "_selected_action": [env.pk]}, follow=True
    ).content.decode()
    assert f"Cannot approve {env.namespace}: its status is " in again
    assert f"{env.namespace.capitalize()}:" not in again


def test_reject_action_asks_for_a_reason_first(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging")
    )
    client = staff("zoe", "approver", "payments")
    page = client.post(URL, {"action": "reject_selected", "_selected_action": [env.pk]})
    assert page.status_code == 200 and b"A reason is required" in page.content
    client.post(
        URL, {"action": "reject_selected", "_selected_action": [env.pk], "apply": "1", "reason": ""}
    )
    env.refresh_from_db()
    assert env.status == "PENDING_APPROVAL"
    done = client.post(
        URL,
        {
            "action": "reject_selected",
            "_selected_action": [env.pk],
            "apply": "1",
            "reason": "too big",
        },
        follow=True,
    )
    assert "Rejected 1 request." in done.content.decode()
    env.refresh_from_db()
    assert env.status == "REJECTED" and env.status_reason == "too big"


def test_engineer_staff_cannot_use_the_environment_admin(people):
    client = staff("eve", "engineer")
    assert client.get(URL).status_code in (302, 403)
    assert Environment.objects.count() == 0


@pytest.mark.parametrize(
    ("url", "allow_private", "words"),
    [
        ("http://169.254.169.254/latest/meta-data/", True, "is link-local"),
        ("http://127.0.0.1:8000/api/v1/", False, "private networks are not allowed"),
    ],
)
def test_a_webhook_refused_in_admin_is_a_form_error_and_changes_nothing(
    people, settings, url, allow_private, words
):
    settings.KILN_WEBHOOK_ALLOW_PRIVATE = allow_private
    root = staff("root-web", "platform-admin")
    team = Team.objects.get(slug="payments")
    page = root.post("/admin/portal/teamwebhook/add/", {"team": team.pk, "url": url})
    assert page.status_code == 200 and words in page.content.decode()
    assert not TeamWebhook.objects.exists()
    ok = root.post(
        "/admin/portal/teamwebhook/add/", {"team": team.pk, "url": "https://chat.example/h"}
    )
    assert ok.status_code == 302 and TeamWebhook.objects.get().url == "https://chat.example/h"


def test_the_environment_list_speaks_of_statuses_in_words_and_filters_by_them(people):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", name="words")
    )
    assert env.status == "PENDING_APPROVAL"
    root = staff("root-words", "platform-admin")
    page = root.get(URL).content.decode()
    assert "Waiting for approval" in page and ">PENDING_APPROVAL<" not in page
    filtered = root.get(URL, {"status": "PENDING_APPROVAL"}).content.decode()
    assert env.namespace in filtered
    assert env.namespace not in root.get(URL, {"status": "READY"}).content.decode()


def test_an_approver_is_offered_only_its_teams_and_reads_statuses_in_words(people, teams):
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", name="mine")
    )
    environment_request_submit(
        actor=people["bob"], data=request_data(team="search", env_class="staging", name="theirs")
    )
    carol = staff("carol-filters", "approver", "payments")
    page = carol.get(URL).content.decode()
    assert f"team__id__exact={teams['search'].pk}" not in page and "search-theirs" not in page
    change = carol.get(f"{URL}{env.pk}/change/").content.decode()
    assert "PENDING_APPROVAL" not in change and "Waiting for approval" in change
    confirm = carol.post(
        URL, {"action": "reject_selected", "_selected_action": [env.pk]}
    ).content.decode()
    assert "(staging, Waiting for approval)" in confirm


def admin_links(page: str) -> set[str]:
    """The admin pages a page links to (its own actions and the log-out form left aside)."""
    links = set(re.findall(r'href="(/admin/[^"#?]*)', page))
    return {link for link in links if not link.endswith(("/logout/", "/password_change/"))}


def test_an_approver_follows_no_admin_link_into_a_refusal(people, teams, settings):
    """Django links a read-only user to the user's admin page, which only platform admins may
    open: an approver reading its team, a membership or a quarantined environment followed it
    to a 403. Every admin link on those pages opens for the approver who was shown it."""
    env, _ = environment_request_submit(
        actor=people["alice"], data=request_data(env_class="staging", name="held")
    )
    Environment.objects.filter(pk=env.pk).update(
        quarantine_owner=get_user_model().objects.get(username="alice")
    )
    carol = staff("carol-links", "approver", "payments")
    membership = Membership.objects.get(user__username="alice")
    pages = (
        f"{URL}{env.pk}/change/",
        f"/admin/kiln/membership/{membership.pk}/change/",
        f"/admin/kiln/team/{teams['payments'].pk}/change/",
        "/admin/kiln/membership/",
    )
    for url in pages:
        page = carol.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert "alice" in body, url  # the user is still named, as text
        for link in admin_links(body):
            assert carol.get(link).status_code == 200, f"{url} links to {link}"
    # An approver who sees every team's environments does not see every team: another team's
    # environment names its team as text.
    settings.KILN_APPROVERS_GLOBAL = True
    theirs, _ = environment_request_submit(
        actor=people["bob"], data=request_data(team="search", env_class="staging", name="theirs")
    )
    page = carol.get(f"{URL}{theirs.pk}/change/")
    assert page.status_code == 200 and "Search" in page.content.decode()
    for link in admin_links(page.content.decode()):
        assert carol.get(link).status_code == 200, f"another team's environment links to {link}"
