"""The rollout start form explains its timing fields: what a tick is, how long a step lasts."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import WatchedPage


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("ticks_per_step", ("a tick is one analysis of the canary against the baseline",)),
        ("tick_seconds", ("seconds between two analyses", "ticks per step")),
    ],
)
def test_tick_fields_say_what_a_tick_is(browser_page: WatchedPage, field, words):
    """Each timing field has visible help text that its input is described by (screen readers
    read it with the field)."""
    page = browser_page.page
    browser_page.login("alice")
    browser_page.goto("/rollouts/new/")
    control = page.locator(f"#id_{field}")
    described_by = control.get_attribute("aria-describedby")
    assert described_by == f"id_{field}_helptext", described_by
    help_text = page.locator(f"#{described_by}")
    assert help_text.is_visible()
    text = help_text.inner_text()
    for word in words:
        assert word in text, text
    # The help sits beside its own field, not elsewhere on the form.
    assert help_text.locator("xpath=..").locator(f"#id_{field}").count() == 1
    browser_page.assert_clean()
