"""An environment with its own spot pool and a small quota, in a browser: its page's Nodes tab
lists the nodes its NodePool launched (each with only its own pods), at desktop and phone widths,
with no console error and no page wider than the screen."""

from __future__ import annotations

from scheduler.simulation.demo import NODE_AGENT
from tests.e2e.api import environment, environment_status, wait_for
from tests.e2e.conftest import WatchedPage


def test_the_nodes_tab_lists_the_nodes_its_own_pool_launched(browser_page: WatchedPage, kiln):
    env = environment(
        kiln, "own-nodes", env_class="ephemeral", workload_class="batch", cpu=2, memory_gib=4,
        spot_node_pool=True,
    )  # fmt: skip
    env = environment_status(kiln, env["id"], "READY", timeout=120)
    namespace, pool = env["namespace"], f"kiln-{env['namespace']}"
    browser_page.login("alice")
    page = browser_page.page

    def listed() -> bool:
        browser_page.goto(f"/environments/{env['id']}/")
        page.click("#tab-nodes")
        page.wait_for_selector("#env-nodes-card :is(#env-nodes, #no-nodes, .error)")
        return page.locator("#env-nodes tbody tr").count() >= 1

    wait_for(listed, timeout=90, what="the environment's own nodes listed")
    for width, suffix in ((1280, ""), (390, "-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        browser_page.goto(f"/environments/{env['id']}/")
        page.click("#tab-nodes")
        page.wait_for_selector("#env-nodes tbody tr")
        # The tab renders itself again every 10 s, and a node may come or go in between: the
        # table is read in one go, not row by row (a row counted may be gone when it is read).
        nodes = page.eval_on_selector_all(
            "#env-nodes tbody tr",
            """rows => rows.map(row => [row.querySelector("td").textContent.trim(),
                                        [...row.querySelectorAll("li")].map(li => li.textContent.trim())])""",
        )
        assert nodes
        for name, pods in nodes:
            assert name.startswith(pool), nodes
            # The demo cluster's node agent (a DaemonSet) lands on every node sooner or later,
            # the pool's own too; no other team's pod may.
            own = [p for p in pods if not p.startswith(f"kube-system/{NODE_AGENT}-")]
            assert own and all(p.startswith(f"{namespace}/") for p in own), pods
        first = page.locator("#env-nodes tbody tr").first
        first.locator("summary").click()
        assert first.locator("li").first.is_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        browser_page.screenshot(f"environment-own-nodes{suffix}")
    browser_page.assert_clean()
