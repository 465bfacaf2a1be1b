"""A signed-in person opening what their role does not allow: a 403 page, and in the server's log
one line for it, never a Python traceback (an ordinary refusal is not an error of Kiln's)."""

from __future__ import annotations

import json

from tests.e2e import api
from tests.e2e.conftest import WatchedPage


def _log_records(kiln, path: str) -> list[dict]:
    """The server's JSON log records of a 403 answered on `path`."""
    records = []
    for line in kiln.stderr().splitlines():
        if path in line and '"status_code": 403' in line:
            records.append(json.loads(line))
    return records


def test_an_engineer_opening_the_approval_queue_gets_a_403_page_logged_without_traceback(
    browser_page: WatchedPage, kiln
):
    page = browser_page.page
    browser_page.login("alice")  # an engineer: approves nothing
    response = browser_page.goto("/environments/approvals/")
    assert response.status == 403
    assert page.locator(".errorcard .status").inner_text() == "403"
    assert page.locator("h1").inner_text() == "Not allowed"
    assert page.locator("a.button.primary").get_attribute("href") == "/"
    # The same refusal over the API (alice's engineer token on the auditors' event list).
    status, body = api.call(kiln, "GET", "/api/v1/audit/events/", "engineer")
    assert status == 403, body

    for path in ("/environments/approvals/", "/api/v1/audit/events/"):
        records = api.wait_for(
            lambda p=path: _log_records(kiln, p), what=f"the 403 of {path} logged"
        )
        for record in records:
            assert record["level"] == "warning", record
            assert "exc" not in record, record["exc"][-2000:]
    assert "Traceback" not in kiln.stderr()
    # The 403 itself is reported on the console as a failed resource; nothing else may be.
    assert [e for e in browser_page.console_errors if "403" not in e] == []
    assert browser_page.csp_violations == []
