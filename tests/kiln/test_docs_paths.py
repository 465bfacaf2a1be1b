"""Every Python path the README and docs/ name is in the tree, so a module moved or split takes
its mentions with it; docs/architecture.md, which also names modules by dotted path and folders
from the root, has those checked too.

How a mention is read: a path whose first folder is one of the tree's own (`bench/`, `kiln/`,
`tests/`, ...) is looked up from the checkout's root; another path with folders must end some
path of the tree (a page on the chaos app naming `services/levers.py`); a bare file name must be
some file's name. Left alone, as clearly outside the tree: absolute paths (URL routes such as
`/audit/tlog_verify.py`), URLs, and `../` paths that leave the checkout (`../shared/`); and a
path struck through (`~~kiln/asgi_handler.py~~`), which names a module that is gone on purpose.

Each check is also run on a small tree and page that break it, so it is seen to fail.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
URL = re.compile(r"\w+://\S+")
STRUCK = re.compile(r"~~.+?~~")
PY_PATH = re.compile(r"(?<![\w./~-])((?:\.{1,2}/|/)?[\w.-]+(?:/[\w.-]+)*\.py)\b(?![\w/-])")
FOLDER = re.compile(r"`([\w.-]+(?:/[\w.-]+)*/)`")
DOTTED = re.compile(r"`([a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\.\*)?(?:\(\))?`")


def ignored_folders(root: Path) -> set[str]:
    """The folder names `.gitignore` lists plainly (`var/`, `node_modules/`): run-time output."""
    ignore = root / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.is_file() else []
    return {line.strip().strip("/") for line in lines if re.fullmatch(r"\s*[\w.-]+/?\s*", line)}


def tree(root: Path) -> tuple[frozenset[str], frozenset[str]]:
    """The files and folders below `root`, as `a/b.py` and `a/`; hidden and ignored folders are
    left out, so a page naming `var/` (made at run time) is not checked against it."""
    skip = ignored_folders(root) | {"__pycache__"}
    files: set[str] = set()
    folders: set[str] = set()
    for here, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and d not in skip]
        rel = Path(here).relative_to(root).as_posix()
        prefix = "" if rel == "." else f"{rel}/"
        if prefix:
            folders.add(prefix)
        files.update(prefix + name for name in names)
    return frozenset(files), frozenset(folders)


@cache
def repo_tree() -> tuple[frozenset[str], frozenset[str]]:
    return tree(ROOT)


def _in_tree(path: str, known: frozenset[str], own: frozenset[str]) -> bool:
    """Whether `path` (a file, or a folder ending in `/`) is in the tree, as the docstring says."""
    if path in known:
        return True
    if path.split("/", 1)[0] + "/" in own:
        return False  # named from the root: it must be there
    return "/" in path.rstrip("/") and any(p.endswith("/" + path) for p in known)


def missing_paths(page: Path, root: Path, text: str | None = None) -> list[str]:
    """`page:line path` for every `.py` path the page names that is not in the tree below `root`."""
    files, folders = tree(root) if root != ROOT else repo_tree()
    names = {f.rsplit("/", 1)[-1] for f in files}
    own = frozenset(f for f in folders if f.count("/") == 1)
    text = page.read_text() if text is None else text
    out = []
    for number, line in enumerate(URL.sub("", text).splitlines(), 1):
        for path in PY_PATH.findall(STRUCK.sub("", line)):
            if path.startswith("/"):
                continue
            if path.startswith(("./", "../")):
                target = (page.parent / path).resolve()
                from_root = (root / path).resolve()
                if target.exists() or not from_root.is_relative_to(root.resolve()):
                    continue
                found = False
            elif "/" in path:
                found = _in_tree(path, files, own)
            else:
                found = path in names
            if not found:
                out.append(f"{page.name}:{number} {path}")
    return out


def missing_folders(page: Path, root: Path, text: str | None = None) -> list[str]:
    """`page:line folder/` for every folder named from the root (`kiln/cluster/`) not in the tree."""
    files, folders = tree(root) if root != ROOT else repo_tree()
    own = frozenset(f for f in folders if f.count("/") == 1)
    text = page.read_text() if text is None else text
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for folder in FOLDER.findall(line):
            if folder.split("/", 1)[0] + "/" in own and folder not in folders:
                out.append(f"{page.name}:{number} {folder}")
    return out


def missing_modules(page: Path, root: Path, text: str | None = None) -> list[str]:
    """`page:line name` for every dotted name of one of the tree's packages (`kiln.errors`,
    `audit.record`) that is neither a module nor a name its package's `__init__` mentions."""
    text = page.read_text() if text is None else text
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for dotted in DOTTED.findall(line):
            first, *rest = dotted.split(".")
            if not (root / first / "__init__.py").is_file():
                continue  # not one of the tree's packages (a domain, a setting)
            if not _module_resolves(root / first, rest):
                out.append(f"{page.name}:{number} {dotted}")
    return out


def _module_resolves(package: Path, rest: list[str]) -> bool:
    """Whether `rest` names a module below `package`, or a name its nearest package defines."""
    for part in rest:
        if (package / part).is_dir():
            package = package / part
        elif (package / f"{part}.py").is_file():
            return True  # what follows is an attribute of that module
        else:
            init = package / "__init__.py"
            return (
                init.is_file()
                and re.search(rf"\b{re.escape(part)}\b", init.read_text()) is not None
            )
    return True


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_path_a_page_names_exists(page):
    assert missing_paths(page, ROOT) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_folder_a_page_names_from_the_root_exists(page):
    assert missing_folders(page, ROOT) == []


def test_every_module_the_architecture_page_names_exists():
    assert missing_modules(ARCHITECTURE, ROOT) == []


def test_moved_modules_and_folders_are_found(tmp_path):
    for name in ("app/__init__.py", "app/services/levers.py", "tests/support/shape.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("from app.services import levers\n")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    text = (
        "`tests/support/shape.py` and `services/levers.py`, then `levers.py`;\n"
        "moved: `app/shape.py` and `gone.py` and `other/services/gone.py`;\n"
        "outside: `/audit/tlog_verify.py`, ../../shared/x.py, https://example.org/a/b.py\n"
        "gone on purpose: ~~`app/handler.py`~~ and ~~app/old.py~~\n"
        "folders: `app/services/` `tests/support/` `var/` `app/cluster/`\n"
        "modules: `app.services.levers`, `app.levers.run`, `app.nothing`, `kiln.dev`\n"
    )
    assert missing_paths(page, tmp_path, text) == [
        "page.md:2 app/shape.py",
        "page.md:2 gone.py",
        "page.md:2 other/services/gone.py",
    ]
    assert missing_folders(page, tmp_path, text) == ["page.md:5 app/cluster/"]
    assert missing_modules(page, tmp_path, text) == ["page.md:6 app.nothing"]
