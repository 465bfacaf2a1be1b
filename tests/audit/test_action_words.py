"""An action name wraps between its parts on a narrow page, and stays escaped."""

from __future__ import annotations

from audit.templatetags.audit_links import break_at_dots


def test_an_action_name_may_break_after_each_dot_only():
    assert break_at_dots("portal.environment.workloads_removed") == (
        "portal.<wbr>environment.<wbr>workloads_removed"
    )
    assert break_at_dots("plain") == "plain"


def test_what_it_wraps_is_escaped_first():
    assert break_at_dots("<b>x.y</b>") == "&lt;b&gt;x.<wbr>y&lt;/b&gt;"
