"""The project's documents (docs/*.md) as pages, so a document a page names is a link.

`/docs/<name>/` shows docs/<name>.md to anyone signed in: each heading is a heading with the
anchor GitHub gives it (so `/docs/canary/#the-decision-rule` lands on that section), text
between headings as it is written (wrapped, in the page's type), code blocks as code. It is a
reader for the repository's own pages, not a Markdown renderer: what the text says is shown as
written. Only names of files in the docs directory are served.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

NAME = re.compile(r"[a-z][a-z0-9-]{0,40}\Z")


def docs_dir() -> Path:
    """Where the documents are: the repository's docs/ (the image copies it beside the code)."""
    return Path(settings.BASE_DIR) / "docs"


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@dataclass
class Section:
    """A heading (level 1 to 4) and the blocks under it: ("text" | "code", body)."""

    level: int
    title: str
    anchor: str
    blocks: list[tuple[str, str]] = field(default_factory=list)


def sections(text: str) -> list[Section]:
    """The document cut at its headings (outside code blocks)."""
    out = [Section(level=1, title="", anchor="")]
    lines: list[str] = []
    fenced = False

    def flush(kind: str) -> None:
        body = "\n".join(lines).strip("\n")
        if body.strip():
            out[-1].blocks.append((kind, body))
        lines.clear()

    for line in text.splitlines():
        if line.startswith("```"):
            flush("code" if fenced else "text")
            fenced = not fenced
            continue
        heading = re.match(r"(#{1,4}) (.+)", line) if not fenced else None
        if heading:
            flush("text")
            title = heading[2].strip()
            out.append(Section(level=len(heading[1]), title=title, anchor=anchor(title)))
            continue
        lines.append(line)
    flush("code" if fenced else "text")
    return [s for s in out if s.title or s.blocks]


@login_required
def doc_page(request: HttpRequest, name: str) -> HttpResponse:
    """One document of docs/ as a page; a name that is not one is a 404."""
    path = docs_dir() / f"{name}.md"
    if not NAME.match(name) or not path.is_file():
        raise Http404("no such document")
    parts = sections(path.read_text(encoding="utf-8"))
    title = next((s.title for s in parts if s.level == 1 and s.title), name)
    return render(request, "kiln/doc.html", {"name": name, "title": title, "sections": parts})
