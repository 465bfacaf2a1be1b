"""The request form in a browser: a live estimate that follows every field (even while the name is
empty or a number is out of range) and the selected class's limits beside the fields they bound."""

from __future__ import annotations

from tests.e2e.conftest import WatchedPage


def _estimate_text(page) -> str:
    return page.locator("#estimate").inner_text()


def test_estimate_follows_the_fields_while_the_name_is_empty(browser_page: WatchedPage):
    """Item 1: with Name empty (invalid for the browser) the estimate still updates, and an
    out-of-range GPU or CPU count says why there is no price instead of keeping the old one."""
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto("/environments/new/")
    assert page.locator("#id_name").input_value() == ""
    before = _estimate_text(page)
    assert "/ hour" in before
    assert page.locator("#estimate tbody tr").count() == 1  # general-purpose nodes only
    with page.expect_response(lambda r: "/environments/estimate/" in r.url):
        page.fill("#id_gpu", "2")
    page.wait_for_function(
        "b => document.querySelector('#estimate').innerText !== b", arg=before, timeout=5000
    )
    assert page.locator("#estimate tbody tr").count() == 2  # plus the GPU nodes
    with page.expect_response(lambda r: "/environments/estimate/" in r.url):
        page.fill("#id_gpu", "50")
    page.wait_for_function(
        "() => document.querySelector('#estimate').innerText.includes('No estimate')", timeout=5000
    )
    assert "GPUs: Must be a whole number from 0 to 16; a " in _estimate_text(page)
    assert "/ hour" not in _estimate_text(page)
    page.fill("#id_gpu", "0")
    with page.expect_response(lambda r: "/environments/estimate/" in r.url):
        page.fill("#id_cpu", "-2")
    page.wait_for_function(
        "() => document.querySelector('#estimate').innerText.includes('CPU: Must be')",
        timeout=5000,
    )
    assert "/ hour" not in _estimate_text(page)
    browser_page.assert_clean()


def test_class_limits_sit_beside_the_fields_and_follow_the_class(browser_page: WatchedPage):
    """Item 8: the TTL maximum, the GPU limit and whether spot is allowed show before submitting
    and change with the class; every option has help text; latency-sensitive is the default."""
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto("/environments/new/")
    ttl, gpu, spot = (
        page.locator(f"[data-limit={f}]") for f in ("ttl_hours", "gpu", "spot_node_pool")
    )
    assert ttl.inner_text() == "dev: at most 336 h (14 days)."
    assert gpu.inner_text() == "dev: at most 2 GPUs."
    # The default class is latency-sensitive, which no spot pool serves: said before asking.
    assert "latency-sensitive workloads never run on spot capacity" in spot.inner_text()
    page.select_option("#id_workload_class", "batch")
    assert spot.inner_text() == "dev: allowed for batch workloads."
    page.select_option("#id_workload_class", "latency-sensitive")
    page.select_option("#id_env_class", "staging")
    assert ttl.inner_text() == "staging: at most 720 h (30 days)."
    assert gpu.inner_text() == "staging: at most 4 GPUs."
    # The policy's own words (deploy/policies/request/spot-classes.yaml).
    assert spot.inner_text() == "spot node pools are for ephemeral and dev, not staging."
    assert page.locator("#id_ttl_hours").get_attribute("max") == "720"
    for option in ("tenant_control_plane", "spot_node_pool", "database", "workload_class"):
        assert page.locator(f"#help-{option}").inner_text().strip(), option
    assert "Kamaji" in page.locator("#help-tenant_control_plane").inner_text()
    assert page.locator("#id_workload_class").input_value() == "latency-sensitive"
    browser_page.screenshot("request-form")
    browser_page.assert_clean()
