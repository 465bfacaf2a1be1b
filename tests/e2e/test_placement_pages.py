"""Where workloads run, in a browser: each workload's spread over capacity pools and the nodes a
chaos experiment froze on the scheduler page, at desktop and phone widths, with no console
error and no page wider than the screen."""

from __future__ import annotations

from tests.e2e.api import call, environment, environment_status, wait_for
from tests.e2e.conftest import WatchedPage


def test_spread_and_frozen_nodes_on_the_scheduler_page(browser_page: WatchedPage, kiln):
    env = environment(kiln, "spread-walk", workload_class="batch")
    env = environment_status(kiln, env["id"], "READY", timeout=120)
    namespace = env["namespace"]
    browser_page.login("alice")
    page = browser_page.page

    def placed() -> bool:
        browser_page.goto("/scheduler/")
        return f"{namespace}/ReplicaSet/demo-batch" in page.locator("#spread").inner_text()

    wait_for(placed, timeout=90, what="the environment's demo workload placed")
    # A chaos experiment on its batch pods freezes the nodes they run on while it holds its lease.
    status, exp = call(
        kiln, "POST", "/api/v1/chaos/experiments/", "engineer",
        {"name": "freeze walk", "namespace": namespace, "selector": {"app": "demo-batch"},
         "service": "", "fault": "pod-kill", "duration_seconds": 60, "max_duration_seconds": 90,
         "max_pods": 1, "max_percent": 50.0, "stop_conditions": []},
    )  # fmt: skip
    assert status == 201, exp

    def frozen() -> bool:
        browser_page.goto("/scheduler/")
        return "freeze walk" in page.locator("#frozen-section").inner_text()

    wait_for(frozen, timeout=60, what="a node frozen for the experiment")
    for width, suffix in ((1280, ""), (390, "-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        browser_page.goto("/scheduler/")
        row = page.locator("#frozen tbody tr", has_text="freeze walk").first
        assert row.locator("a").get_attribute("href") == f"/chaos/{exp['id']}/"
        # The node list marks the frozen nodes too.
        assert page.locator("#nodes .badge", has_text="frozen").count() >= 1
        spread = page.locator("#spread tbody tr", has_text=f"{namespace}/ReplicaSet/demo-batch")
        assert "batch" in spread.inner_text() and " × " in spread.inner_text()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        browser_page.screenshot(f"scheduler-spread-frozen{suffix}")
    # Aborted, the experiment gives its lease up and its nodes thaw (its controller ends too).
    status, body = call(
        kiln,
        "POST",
        f"/api/v1/chaos/experiments/{exp['id']}/abort/",
        "engineer",
        {"reason": "done"},
    )
    assert status == 200, body

    def thawed() -> bool:
        browser_page.goto("/scheduler/")
        return "freeze walk" not in page.locator("#frozen-section").inner_text()

    wait_for(thawed, timeout=60, what="the experiment's nodes thawed")
    browser_page.assert_clean()
