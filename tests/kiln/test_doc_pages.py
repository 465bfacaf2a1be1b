"""Documents the pages name are links: /docs/<name>/ shows docs/<name>.md with each heading's
anchor, and every link a template makes to a document lands on a document and heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User

from kiln.doc_pages import anchor, sections

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
DOC_LINK = re.compile(r"""\{% url 'doc' '([a-z0-9-]+)' %\}(#[a-z0-9-]+)?""")


def _login(client) -> None:
    user = User.objects.create_user("erin", password="x")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    client.force_login(user)


def test_a_document_is_a_page_with_its_headings_anchored(client):
    assert client.get("/docs/canary/").status_code == 302  # signed in only
    _login(client)
    page = client.get("/docs/canary/")
    html = page.content.decode()
    assert page.status_code == 200
    assert '<h2 id="the-decision-rule">The decision rule</h2>' in html
    assert '<h3 id="ticks-and-the-beat-sweep">Ticks and the beat sweep</h3>' in html
    assert "<script" not in html.split('class="card doc-page"')[1]  # text is escaped, not run


@pytest.mark.parametrize("name", ["nope", "..%2Fsettings", "CANARY", "canary.md"])
def test_a_name_that_is_no_document_is_a_404(client, name):
    _login(client)
    assert client.get(f"/docs/{name}/").status_code == 404


def test_every_link_a_template_makes_to_a_document_resolves():
    links = []
    for template in (ROOT / "templates").rglob("*.html"):
        links += [(template.name, *m.groups()) for m in DOC_LINK.finditer(template.read_text())]
    assert links, "no template links a document (the rollout page does)"
    for template, name, fragment in links:
        doc = ROOT / "docs" / f"{name}.md"
        assert doc.is_file(), f"{template}: docs/{name}.md does not exist"
        if fragment:
            found = {s.anchor for s in sections(doc.read_text())}
            assert fragment[1:] in found, f"{template}: docs/{name}.md has no heading {fragment}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# Title\nintro\n## A `code` heading\nbody", [("Title", "title", ["intro"]),
                                                     ("A `code` heading", "a-code-heading", ["body"])]),
        ("## Fenced\n```\n# not a heading\n```\nafter", [("Fenced", "fenced", ["# not a heading", "after"])]),
    ],
    ids=["headings", "fenced-hash-is-code"],
)  # fmt: skip
def test_sections_cut_at_headings_outside_code(text, expected):
    got = [(s.title, s.anchor, [b for _, b in s.blocks]) for s in sections(text)]
    assert got == expected
    assert anchor("Ticks and the beat sweep") == "ticks-and-the-beat-sweep"
