"""Helpers shared by the page tests: what the Content-Security-Policy would refuse in HTML."""

from __future__ import annotations

from html.parser import HTMLParser


class _InlineFinder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self._in_script_without_src = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if "style" in names:
            self.problems.append(f"style attribute on <{tag}>")
        if any(name.startswith("on") for name in names):
            self.problems.append(f"inline event handler on <{tag}>")
        if tag == "style":
            self.problems.append("<style> element")
        if tag == "script" and "src" not in names:
            self._in_script_without_src = True
        for name, value in attrs:
            if name in {"href", "src", "action"} and (value or "").lower().startswith(
                "javascript:"
            ):
                self.problems.append(f"javascript: URL on <{tag}>")
            if name in {"href", "src"} and (value or "").startswith(("http://", "https://", "//")):
                self.problems.append(f"off-site {name} {value} on <{tag}>")

    def handle_data(self, data: str) -> None:
        if self._in_script_without_src and data.strip():
            self.problems.append("inline <script>")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script_without_src = False


def csp_problems(html: str) -> list[str]:
    """Everything in `html` that a strict same-origin, no-inline CSP would block."""
    finder = _InlineFinder()
    finder.feed(html)
    return finder.problems


class _TableReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("id") or "", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None


def tables(html: str) -> dict[str, list[list[str]]]:
    """Each <table> of `html` by id: its rows (header rows too) as lists of cell texts."""
    reader = _TableReader()
    reader.feed(html)
    return reader.tables
