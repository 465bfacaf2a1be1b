"""One wording per rule, at a desktop's width (1,280 px) and a phone's (390 px): a request the
browser would let through with an out-of-range quota is refused beside the field in the API's
own words, the words the estimate beside it uses too."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e import api
from tests.e2e.conftest import WatchedPage

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_form_refuses_a_quota_in_the_apis_words(browser_page: WatchedPage, kiln, screen):
    size = WIDTHS[screen]
    page = browser_page.page
    page.set_viewport_size(size)
    # The API's words for the rule.
    status, refused = api.call(
        kiln, "POST", "/api/v1/environments/", "engineer",
        {"team": "payments", "name": f"words-{screen}", "env_class": "dev", "ttl_hours": 8,
         "workload_class": "standard", "cpu": 9999, "memory_gib": 4, "gpu": 0},
    )  # fmt: skip
    assert status == 400
    (words,) = refused["extra"]["fields"]["cpu"]
    browser_page.login("alice")
    browser_page.goto("/environments/new/")
    page.fill("#id_name", f"words-{screen}")
    page.select_option("#id_env_class", "dev")
    page.fill("#id_cpu", "9999")
    # The input's max is the browser's hint; past it (a script, an old browser), Kiln says why.
    page.evaluate("document.querySelector('#id_cpu').form.noValidate = true")
    with page.expect_navigation():
        page.locator("#id_cpu").evaluate("el => el.form.requestSubmit()")
    error = page.locator("#field-cpu .error")
    expect(error).to_have_text(words)
    assert "Ensure this value" not in page.content()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"], f"the refused form is {width} px wide"
    browser_page.screenshot(f"request-words-{screen}")
    browser_page.assert_clean()
