"""The README and docs/ stay true to the tree: links resolve, every setting is documented.

Each check is run on the real files and on a bad sample, so it is seen to fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ENV_READERS = {"env", "env_bool", "env_int", "env_float"}


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Anchors of the page's headings, outside code blocks."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """Relative links of `page` whose file or heading does not exist."""
    text = page.read_text() if text is None else text
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{page.name}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            out.append(f"{page.name}: {target} (no such heading)")
    return out


def variables_read(settings_source: str) -> set[str]:
    """Environment variables a settings module reads (`env*("NAME", ...)`, `os.environ.get`)."""
    names = set()
    for node in ast.walk(ast.parse(settings_source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ENV_READERS:
            names.add(first.value)
        elif isinstance(func, ast.Attribute) and func.attr == "get":
            if ast.unparse(func.value) == "os.environ":
                names.add(first.value)
    return names


def undocumented(names: set[str], doc: str) -> list[str]:
    return sorted(name for name in names if f"`{name}`" not in doc)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    assert broken_links(page) == []


def test_broken_links_are_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n")
    page.write_text(
        "[ok](other.md) [ok](other.md#a-section) [gone](missing.md) "
        "[no heading](other.md#nowhere) [web](https://example.org/x)\n"
        "```\n[in code](not-checked.md)\n```\n"
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nowhere (no such heading)",
    ]


def test_readme_stays_a_short_guide_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make run" in text and "make test" in text


def settings_sources() -> list[Path]:
    """The settings: the package kiln/settings/ (one module per topic), or one file."""
    package = ROOT / "kiln" / "settings"
    return sorted(package.glob("*.py")) if package.is_dir() else [ROOT / "kiln" / "settings.py"]


def test_every_setting_read_from_the_environment_is_documented():
    names = set().union(*(variables_read(path.read_text()) for path in settings_sources()))
    assert len(names) > 50  # the reader found the settings
    assert undocumented(names, (ROOT / "docs" / "configuration.md").read_text()) == []


def test_an_undocumented_setting_is_found():
    source = 'import os\nA = env("KILN_NEW_THING", "1")\nB = os.environ.get("KILN_OTHER")\n'
    assert variables_read(source) == {"KILN_NEW_THING", "KILN_OTHER"}
    assert undocumented({"KILN_NEW_THING", "KILN_OTHER"}, "| `KILN_OTHER` | x |") == [
        "KILN_NEW_THING"
    ]
