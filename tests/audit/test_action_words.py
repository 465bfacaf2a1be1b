"""Audit pages in words: an action name wraps between its parts on a narrow page and stays
escaped; the entries a checkpoint does not cover yet are counted in the singular and plural."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from audit.templatetags.audit_links import break_at_dots


def test_an_action_name_may_break_after_each_dot_only():
    assert break_at_dots("portal.environment.workloads_removed") == (
        "portal.<wbr>environment.<wbr>workloads_removed"
    )
    assert break_at_dots("plain") == "plain"


def test_what_it_wraps_is_escaped_first():
    assert break_at_dots("<b>x.y</b>") == "&lt;b&gt;x.<wbr>y&lt;/b&gt;"


@pytest.mark.parametrize(("behind", "words"), [(1, "1 newer entry"), (3, "3 newer entries")])
def test_the_entries_a_checkpoint_does_not_cover_are_counted_in_words(behind, words):
    checkpoint = {"size": 5, "signed_at": None}
    tlog = render_to_string(
        "audit/_tlog.html", {"tlog": {"checkpoint": checkpoint, "behind": behind}}
    )
    assert f"{words} not signed yet" in tlog
    status = {"checkpoint": checkpoint, "checkpoint_behind": behind}
    assert f"{words} uncovered" in render_to_string("audit/_status.html", {"status": status})
