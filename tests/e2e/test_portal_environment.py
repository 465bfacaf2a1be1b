"""The environment page in a browser: tabs, how to connect, lifecycle words, teardown confirmed by
typing the name, and editing a denied request to submit it again."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e import api
from tests.e2e.conftest import WatchedPage


@pytest.fixture(scope="module")
def ready_env(kiln) -> dict:
    """A dev environment with a tenant control plane and a database, READY."""
    env = api.environment(
        kiln, "connect-me", tenant_control_plane=True, database=True, spot_node_pool=True
    )
    return api.environment_status(kiln, env["id"], "READY")


def _tab(page, name: str) -> None:
    page.click(f"[role=tab]#tab-{name}")
    assert page.locator(f"#panel-{name}").is_visible()


def _never_provisioned(browser_page: WatchedPage, env_id: str, status: str, why: str):
    """alice opens a request that never provisioned: its status in words, and the progress tab
    says why nothing was (never "No provisioning steps yet"); returns the page."""
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto(f"/environments/{env_id}/")
    assert page.locator("#env-status").inner_text() == status
    _tab(page, "progress")
    assert why in page.locator("#progress").inner_text()
    assert "No provisioning steps yet" not in page.content()
    return page


def test_ready_environment_says_how_to_connect(browser_page: WatchedPage, ready_env, kiln):
    """Item 5 and the tabs: the name as title, kubectl context, a kubeconfig download for the
    namespace, the control plane's and database's Secret names; policy collapsed when all allow;
    manifests highlighted, copyable and downloadable as one bundle."""
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto(f"/environments/{ready_env['id']}/")
    assert page.locator("h1").inner_text().startswith("connect-me")
    assert "Ready" in page.locator("#env-status").inner_text()
    connect = page.locator("#connect")
    assert connect.is_visible()
    assert "kiln-payments-connect-me" in connect.inner_text()
    assert page.locator("#db-secret").inner_text() == "connect-me-db-connection"
    assert "payments-connect-me-admin-kubeconfig" in connect.inner_text()
    with page.expect_download() as download:
        page.click("text=Download kubeconfig for payments-connect-me")
    config = yaml.safe_load(open(download.value.path()).read())
    assert config["current-context"] == "kiln-payments-connect-me"
    assert config["contexts"][0]["context"]["namespace"] == "payments-connect-me"
    browser_page.screenshot("environment-overview")
    # Panels other than the selected tab are hidden.
    assert not page.locator("#panel-manifests").is_visible()
    _tab(page, "policy")
    policy = page.locator("details.portal-policy")
    assert policy.get_attribute("open") is None
    assert "policy checks allowed" in policy.locator("summary").inner_text()
    assert not policy.locator("table").is_visible()
    _tab(page, "manifests")
    assert page.locator("pre.yaml .y-key").count() > 3
    assert page.locator("#panel-manifests button[data-copy]").first.is_visible()
    with page.expect_download() as download:
        page.click("text=Download all as one YAML bundle")
    kinds = [d["kind"] for d in yaml.safe_load_all(open(download.value.path()).read())]
    assert "Namespace" in kinds and "TenantControlPlane" in kinds and "PostgreSQLInstance" in kinds
    # The spot pool spreads over the zones the pricing and the nodes are in.
    manifests = page.locator("#panel-manifests").text_content()
    assert "us-east-1a" in manifests and "eu-west" not in manifests
    browser_page.screenshot("environment-manifests")
    _tab(page, "cost")
    assert "Spent so far" in page.locator("#panel-cost").inner_text()
    browser_page.assert_clean()


def test_lifecycle_words_after_auto_approval_and_extension(browser_page: WatchedPage, kiln):
    """Item 6: an auto-approved request never reads "queued for approval"; after extending by 24 h
    the TTL reads 32 h; statuses are words, not PENDING_APPROVAL."""
    env = api.environment(kiln, "words")
    api.environment_status(kiln, env["id"], "READY")
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto(f"/environments/{env['id']}/")
    page.fill("input[name=hours]", "24")
    with page.expect_navigation():
        page.click("text=Extend TTL")
    assert page.locator("#env-ttl").inner_text().startswith("32 h (8 h asked, extended by 24 h)")
    _tab(page, "timeline")
    timeline = page.locator("#panel-timeline").inner_text()
    assert "Approved automatically" in timeline and "Policies allowed" in timeline
    assert "queued" not in timeline.lower()
    assert "TTL extended by 24 h" in timeline
    staging = api.environment(kiln, "waits", env_class="staging")
    assert staging["status"] == "PENDING_APPROVAL"
    browser_page.goto("/environments/")
    listing = page.locator("table.data").inner_text()
    assert "Waiting for approval" in listing and "PENDING_APPROVAL" not in listing
    browser_page.assert_clean()


def test_teardown_needs_the_name_typed(browser_page: WatchedPage, kiln):
    """Item 3: the button stays disabled until the name is typed, the server refuses a wrong
    name and changes nothing, and a manual teardown never reads as expired."""
    env = api.environment(kiln, "tear-me")
    api.environment_status(kiln, env["id"], "READY")
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto(f"/environments/{env['id']}/")
    button = page.locator("form.portal-confirm button[type=submit]")
    assert button.is_disabled()
    page.fill("form.portal-confirm input[name=confirm]", "tear-m")
    assert button.is_disabled()
    # Bypass the script: the server must refuse too.
    page.evaluate("document.querySelector('form.portal-confirm button').disabled = false")
    with page.expect_navigation():
        button.click()
    assert "Nothing was torn down" in page.locator(".messages").inner_text()
    assert (
        api.call(kiln, "GET", f"/api/v1/environments/{env['id']}/", "engineer")[1]["status"]
        == "READY"
    )
    page.fill("form.portal-confirm input[name=confirm]", "tear-me")
    assert button.is_enabled()
    with page.expect_navigation():
        button.click()
    status = page.locator("#env-status").inner_text()
    assert status in ("Teardown requested", "Tearing down", "Deleted"), status
    browser_page.assert_clean()


def test_denied_request_is_edited_and_resubmitted(browser_page: WatchedPage, kiln):
    """Item 6 and resubmit: a denied request says nothing was provisioned (not "no steps yet"),
    and "Edit and resubmit" opens the form with its values to fix and send again."""
    denied = api.environment(
        kiln, "spotty", env_class="staging", spot_node_pool=True, workload_class="batch"
    )
    assert denied["status"] == "DENIED", denied
    page = _never_provisioned(
        browser_page, denied["id"], "Denied by policy", "Nothing was provisioned: a policy denied"
    )
    _tab(page, "policy")
    assert page.locator("details.portal-policy").get_attribute("open") is not None
    assert "spot node pools are for ephemeral and dev" in page.locator("#panel-policy").inner_text()
    with page.expect_navigation():
        page.locator("a", has_text="Edit and resubmit").first.click()
    assert page.locator("#id_name").input_value() == "spotty"
    assert page.locator("#id_env_class").input_value() == "staging"
    assert page.locator("#id_spot_node_pool").is_checked()
    page.select_option("#id_env_class", "dev")
    with page.expect_navigation():
        page.click("button[type=submit].primary")
    assert page.locator("h1").inner_text().startswith("spotty")
    assert "Denied" not in page.locator("#env-status").inner_text()
    browser_page.assert_clean()


def test_rejected_request_says_who_stopped_it_and_can_be_resubmitted(
    browser_page: WatchedPage, kiln
):
    """Item 6 for a rejection: the status is a word, the progress says an approver rejected it
    (not "No provisioning steps yet"), and "Edit and resubmit" opens the form with its values."""
    env = api.environment(kiln, "turned-down", env_class="staging")
    assert env["status"] == "PENDING_APPROVAL", env
    status, rejected = api.call(
        kiln, "POST", f"/api/v1/environments/{env['id']}/reject/", "approver",
        {"reason": "staging is full this week"},
    )  # fmt: skip
    assert status == 200 and rejected["status"] == "REJECTED", rejected
    page = _never_provisioned(
        browser_page, env["id"], "Rejected", "Nothing was provisioned: an approver rejected"
    )
    with page.expect_navigation():
        page.locator("a", has_text="Edit and resubmit").first.click()
    assert page.locator("#id_name").input_value() == "turned-down"
    assert page.locator("#id_env_class").input_value() == "staging"
    browser_page.assert_clean()
