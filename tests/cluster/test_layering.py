"""The cluster interface stands beneath every app: kiln/cluster imports no app, and no code
anywhere decides by which backend is configured (it asks the protocol instead)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "kiln" / "cluster"
APPS = ("audit", "portal", "scheduler", "canary")
ALLOWED_KILN = ("kiln.cluster", "kiln.errors", "kiln.params", "kiln.parsers")
# The driver (the simulated cluster's bind UPDATE binds its arrays in binary) and the JSON encoder.
THIRD_PARTY = {"django", "kubernetes", "yaml", "psycopg", "orjson"}
# The one import inside a function: the kubernetes backend, and with it the client library, is
# loaded when a process chooses it, not by every process that starts (test_startup_imports.py).
LOADED_WHEN_CHOSEN = {("kiln/cluster/backends.py", "kiln.cluster.kubernetes")}

BRANCHES = [
    re.compile(r"getattr\(\s*[\w.]*(backend|observer)\w*\s*,\s*[\"']name[\"']"),
    re.compile(r"\b(backend|observer)\w*\.name\s*(==|!=|in\b)"),
    re.compile(r"isinstance\([^)]*\b(Simulated|Kubernetes|GitOps)Backend\b"),
    re.compile(r"KILN_DELIVERY_BACKEND[^\n]*(==|!=)"),
    re.compile(r"\._render\("),
]


def _product_files() -> list[Path]:
    out = []
    for top in ("kiln", *APPS):
        for path in (ROOT / top).rglob("*.py"):
            # Settings are configuration: they may derive one setting's default from another.
            settings = (
                path == ROOT / "kiln" / "settings.py" or ROOT / "kiln" / "settings" in path.parents
            )
            if "migrations" in path.parts or settings:
                continue
            out.append(path)
    return out


def _imports(tree: ast.AST) -> list[tuple[str, list[str], bool]]:
    """(module, names, inside a function) for every import in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    inner.in_function = True  # type: ignore[attr-defined]
    for node in ast.walk(tree):
        inside = getattr(node, "in_function", False)
        if isinstance(node, ast.Import):
            found.extend((alias.name, [], inside) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names], inside))
    return found


def test_kiln_cluster_imports_no_app_but_audit_record_and_nothing_inside_functions():
    problems = []
    for path in sorted(CLUSTER.rglob("*.py")):
        for module, names, inside in _imports(ast.parse(path.read_text())):
            top = module.split(".")[0]
            where = path.relative_to(ROOT)
            if inside and (str(where), module) not in LOADED_WHEN_CHOSEN:
                problems.append(f"{where}: imports {module} inside a function")
            if top in APPS and not (module == "audit" and names == ["record"]):
                problems.append(f"{where}: imports the app module {module}")
            elif top == "kiln" and not module.startswith(ALLOWED_KILN):
                problems.append(f"{where}: imports {module}")
            elif top not in {"kiln", "__future__", *APPS, *THIRD_PARTY} and (
                top not in sys.stdlib_module_names
            ):
                problems.append(f"{where}: imports {module}")
    assert problems == []


def test_no_code_branches_on_which_backend_is_configured():
    hits = []
    for path in _product_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(p.search(line) for p in BRANCHES):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == []


def test_the_branch_patterns_catch_what_they_are_meant_to():
    for line in (
        'if getattr(backend, "name", "") == "simulated":',
        "if backend.name == 'kubernetes':",
        "if isinstance(backend, SimulatedBackend):",
        'if settings.KILN_DELIVERY_BACKEND != "kubernetes":',
        "return [backend._render(o) for o in rows]",
    ):
        assert any(p.search(line) for p in BRANCHES), line
    assert not any(p.search('span.set_attribute("kiln.backend", backend.name)') for p in BRANCHES)
