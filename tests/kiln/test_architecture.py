"""The dependency rules of docs/architecture.md, read from the code's own imports.

The import graph is built with `ast` over the project's packages (migrations are left
out: they are generated, and name other apps only as migration dependencies). Each
import is resolved to the module of the tree it loads; an import inside a function
or under `if TYPE_CHECKING:` is marked as such, since it does not run when its
module is imported.

The rules:

1. `kiln` imports no app. The one exception is recording audit events through
   `audit.record` (`from audit import record`, or `import audit` used only as
   `audit.record`). The URL map and the ASGI application find the apps' URL modules
   and websocket routes by the names settings give them (`KILN_APP_URLCONFS`,
   `KILN_WEBSOCKET_ROUTES`), not by importing them.
2. No import circles between the top-level packages and apps (`kiln`, `audit`,
   `portal`, `scheduler`, `canary`, and `chaos` once it is its own app), leaving
   aside the `kiln -> audit.record` edge of rule 1: every layer records to the audit
   spine, and the spine itself stands on `kiln`'s errors and permissions.
3. No import circles between modules (module-level imports).
4. The algorithm modules import no Django, neither directly nor through any module of
   the tree they load (a package's `__init__` included), so they run, are tested and
   are benchmarked without settings.

Where a rule did not hold when this test was written, the violations are listed
below by name, so that a new one fails while the known ones are fixed.

Run as a script it prints the graph between packages and apps:
`python tests/kiln/test_architecture.py`.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kiln", "audit", "portal", "scheduler", "canary", "bench")
CHAOS = "canary.chaos"  # its own app (label `chaos`) inside the canary package

# Where a rule does not hold, its violations by name (none on main as this was last changed).
# Rule 1: (kiln module, app module).
KNOWN_KILN_IMPORTS: set[tuple[str, str]] = set()
# Rule 2: imports (module, module) on a circle between packages/apps.
KNOWN_PACKAGE_CIRCLE_IMPORTS: set[tuple[str, str]] = set()
# Rule 3: modules on an import circle.
KNOWN_MODULE_CIRCLES: list[set[str]] = []

# Rule 4: the algorithm modules (docs/architecture.md, "Algorithms without Django").
DJANGO_FREE = (
    "audit.chain",
    "audit.chain.hashing",
    "audit.chain.notes",
    "audit.chain.renamed",
    "audit.export",
    "audit.export.verify",
    "audit.tree",
    "audit.tree.cache",
    "audit.tree.merkle",
    "audit.tree.tlog_verify",
    "audit.witness",
    "audit.witness.protocol",
    "bench.canary",
    "canary.chaos.faults",
    "canary.chaos.leases",
    "canary.chaos.manifests",
    "canary.faults",
    "canary.hosts",
    "canary.promql",
    "canary.sequential",
    "canary.traffic",
    "kiln.benchjson",
    "portal.compose",
    "portal.lifecycle",
    "portal.policy",
    "portal.policy_files",
    "scheduler.commitment",
    "scheduler.disruption",
    "scheduler.extender.encoding",
    "scheduler.extender.lookup",
    "scheduler.extender.names",
    "scheduler.extender.quantity",
    "scheduler.karpenter",
    "scheduler.kubedefault",
    "scheduler.kubefilters",
    "scheduler.replay",
    "scheduler.scoring",
    "scheduler.scoring_kernel",
)
FRAMEWORKS = ("django", "rest_framework", "drf_spectacular", "channels")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: `source` module loads `target` module of the tree."""

    source: str
    target: str
    line: int
    names: tuple[str, ...]  # the names of `from target import ...`; empty for `import target`
    deferred: bool  # inside a function, or under `if TYPE_CHECKING:`: does not run on import


@cache
def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `packages` under `root`."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def unit(module: str) -> str:
    """The package or app a module belongs to: `chaos` for canary/chaos/, else its top level."""
    if module == CHAOS or module.startswith(CHAOS + "."):
        return "chaos"
    return module.split(".")[0]


class _Collector(ast.NodeVisitor):
    """The imports of one module, each marked deferred when it is not run on import."""

    def __init__(self, module: str, is_package: bool, known: dict[str, Path]):
        self.module, self.is_package, self.known = module, is_package, known
        self.deferred = 0
        self.found: list[tuple[str, tuple[str, ...], int, bool]] = []

    def _defer(self, node: ast.AST) -> None:
        self.deferred += 1
        self.generic_visit(node)
        self.deferred -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _defer

    def visit_If(self, node: ast.If) -> None:
        if ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self.deferred += 1
            for child in node.body:
                self.visit(child)
            self.deferred -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, (), node.lineno, self.deferred > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            if not self.is_package:
                base.pop()
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            # `from package import module` loads that module; `from module import name` the module.
            target = submodule if submodule in self.known else source
            self.found.append((target, (alias.name,), node.lineno, self.deferred > 0))


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module of the tree that `import name` loads last, or None outside the tree."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> tuple[Import, ...]:
    """Every import between two modules of the tree."""
    known = modules(root, packages)
    out = []
    for module, path in known.items():
        collector = _Collector(module, path.name == "__init__.py", known)
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        for name, names, line, deferred in collector.found:
            target = _resolve(name, known)
            if target and target != module:
                out.append(Import(module, target, line, names, deferred))
    return tuple(out)


def _audit_used_only_for_record(path: Path) -> bool:
    """`import audit` in this file is used only as `audit.record`."""
    tree = ast.parse(path.read_text())
    uses = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "audit"
    ]
    return all(attr == "record" for attr in uses)


def records_only(edge: Import, files: dict[str, Path]) -> bool:
    """The edge is the allowed `kiln -> audit.record`."""
    if edge.target == "audit" and edge.names:
        return edge.names == ("record",)
    if edge.target == "audit.services.recording":
        return edge.names == ("record",)
    if edge.target == "audit" and not edge.names:
        return _audit_used_only_for_record(files[edge.source])
    return False


def kiln_app_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> set[tuple[str, str]]:
    """Rule 1's violations: (kiln module, app module) for every import but audit.record."""
    files = modules(root, packages)
    return {
        (edge.source, edge.target)
        for edge in imports(root, packages)
        if unit(edge.source) == "kiln"
        and unit(edge.target) != "kiln"
        and not records_only(edge, files)
    }


def package_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, dict[str, list]]:
    """from -> to -> the imports making the edge, between packages and apps (rule 1's edge aside)."""
    files = modules(root, packages)
    graph: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for edge in imports(root, packages):
        a, b = unit(edge.source), unit(edge.target)
        if a == b or (a == "kiln" and records_only(edge, files)):
            continue
        graph[a][b].append(edge)
    return graph


def circles(graph: dict[str, set[str]] | dict[str, dict]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan), i.e. import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.add(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in list(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def circle_edges(graph: dict[str, dict[str, list]]) -> set[tuple[str, str]]:
    """Edges between packages/apps that lie on a circle."""
    out = set()
    for component in circles(graph):
        out |= {(a, b) for a in component for b in graph[a] if b in component}
    return out


def module_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the modules it imports when it is imported (deferred imports left out)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in imports(root, packages):
        if not edge.deferred:
            graph[edge.source].add(edge.target)
    return graph


@cache
def outside_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> top-level names of what it imports from outside the tree."""
    known = modules(root, packages)
    out: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            out[module] |= {n.split(".")[0] for n in names if not _resolve(n, known)}
    return out


@cache
def load_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the modules that run when it is imported: its module-level imports, and the
    `__init__` of every package above it (importing a.b.c runs a and a.b first)."""
    known = modules(root, packages)
    graph = module_graph(root, packages)
    for name in known:
        parent = name.rpartition(".")[0]
        while parent:
            if parent in known:
                graph[name].add(parent)
            parent = parent.rpartition(".")[0]
    return graph


def framework_paths(root: Path, module: str, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """How importing `module` loads a framework: `a -> b -> django`; empty when it does not."""
    graph = load_graph(root, packages)
    outside = outside_imports(root, packages)
    seen, queue, paths = {module: [module]}, [module], []
    while queue:
        current = queue.pop(0)
        hit = sorted(outside[current] & set(FRAMEWORKS))
        if hit:
            paths.append(" -> ".join([*seen[current], hit[0]]))
        for other in sorted(graph[current]):
            if other not in seen:
                seen[other] = [*seen[current], other]
                queue.append(other)
    return paths


# --- the rules on the tree -------------------------------------------------------------


def test_the_graph_is_read():
    edges = imports(ROOT)
    assert len(modules(ROOT)) > 100 and len(edges) > 500
    assert any(e.source == "kiln.urls" and unit(e.target) == "portal" for e in edges) or any(
        unit(e.source) == "portal" and unit(e.target) == "kiln" for e in edges
    )


def test_kiln_imports_no_app_but_audit_record():
    new = kiln_app_imports(ROOT) - KNOWN_KILN_IMPORTS
    assert not new, "kiln imports an app beyond audit.record: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(new)
    )


def circle_imports(graph: dict[str, dict[str, list]]) -> set[tuple[str, str]]:
    """The imports (module, module) that make the edges lying on a circle."""
    return {(e.source, e.target) for a, b in circle_edges(graph) for e in graph[a][b]}


def test_no_circles_between_packages_and_apps():
    graph = package_graph(ROOT)
    new = circle_imports(graph) - KNOWN_PACKAGE_CIRCLE_IMPORTS
    detail = [f"{a} imports {b}" for a, b in sorted(new)]
    assert not new, "import circle between packages/apps: " + "; ".join(detail)


def test_no_circles_between_modules():
    new = [c for c in circles(module_graph(ROOT)) if c not in KNOWN_MODULE_CIRCLES]
    assert not new, "module import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in new)


@pytest.mark.parametrize("module", DJANGO_FREE)
def test_algorithm_module_imports_no_django(module):
    assert module in modules(ROOT), f"{module} is not a module of the tree"
    assert framework_paths(ROOT, module) == []


# --- the checker on a small tree that breaks every rule ---------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def bad_tree(tmp_path) -> Path:
    return _tree(
        tmp_path,
        {
            "kiln/__init__.py": "",
            "kiln/errors.py": "class KilnError(Exception): ...\n",
            "kiln/ok.py": "from audit import record\nimport audit\naudit.record('a', 'b', 'c', {})\n",
            "kiln/bad.py": "from portal.models import Team\n",
            "kiln/sneaky.py": "import audit\naudit.models.ChainEvent\n",
            "kiln/later.py": "def f():\n    from scheduler import models\n",
            "audit/__init__.py": "from audit.recording import record\n",
            "audit/recording.py": "from kiln.errors import KilnError\ndef record(*a): ...\n",
            "audit/models.py": "",
            "portal/__init__.py": "",
            "portal/models.py": "from portal import services\n",
            "portal/services.py": "from portal.models import *\nfrom scheduler import models\n",
            "scheduler/__init__.py": "",
            "scheduler/models.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from kiln import bad\nfrom portal import models\n",
            "canary/__init__.py": "",
            "canary/chaos/__init__.py": "",
            "canary/chaos/leases.py": "from canary import traffic\n",
            "canary/sequential.py": "import numpy\nfrom canary import pure_helpers\n",
            "canary/pure_helpers.py": "import math\n",
            "canary/scoring.py": "from canary.chaos import leases\n",
            "canary/chaos/views.py": "from django.http import HttpResponse\n",
            "canary/traffic.py": "from canary.chaos import leases\n",
        },
    )


def test_checker_finds_kiln_importing_an_app(bad_tree):
    assert kiln_app_imports(bad_tree) == {
        ("kiln.bad", "portal.models"),
        ("kiln.sneaky", "audit"),  # `import audit` used beyond audit.record
        ("kiln.later", "scheduler.models"),  # deferred, still an import of an app
    }


def test_checker_finds_circles_between_packages(bad_tree):
    graph = package_graph(bad_tree)
    # Deferred imports are dependencies too (scheduler -> kiln under TYPE_CHECKING, kiln ->
    # scheduler inside a function): kiln, portal, scheduler and audit form one circle, and
    # chaos <-> canary another.
    assert circle_edges(graph) == {
        ("kiln", "portal"),
        ("kiln", "scheduler"),
        ("kiln", "audit"),
        ("audit", "kiln"),
        ("portal", "scheduler"),
        ("scheduler", "portal"),
        ("scheduler", "kiln"),
        ("chaos", "canary"),
        ("canary", "chaos"),
    }
    assert ("canary.chaos.leases", "canary.traffic") in circle_imports(graph)
    # kiln -> audit is only kiln.sneaky's import: kiln.ok's audit.record is not an edge.
    assert {e.source for e in graph["kiln"]["audit"]} == {"kiln.sneaky"}


def test_checker_finds_module_circles_and_skips_deferred_imports(bad_tree):
    found = circles(module_graph(bad_tree))
    # portal.models -> portal.services -> scheduler.models -> portal.models.
    assert {"portal.models", "portal.services", "scheduler.models"} in found
    assert {"canary.chaos.leases", "canary.traffic"} in found
    # scheduler.models -> kiln.bad only under TYPE_CHECKING, kiln.later's import inside a
    # function: neither runs on import, so no circle through kiln.
    assert len(found) == 2


def test_checker_finds_a_framework_loaded_on_the_way(bad_tree):
    assert framework_paths(bad_tree, "canary.sequential") == []  # numpy and the tree's math
    # canary.scoring loads canary.chaos.leases; the chaos views (Django) are not loaded.
    assert framework_paths(bad_tree, "canary.scoring") == []
    # Once canary/chaos/__init__ imports the views, importing the leases runs it first.
    (bad_tree / "canary" / "chaos" / "__init__.py").write_text("from canary.chaos import views\n")
    for cached in (modules, imports, outside_imports, load_graph):
        cached.cache_clear()
    assert framework_paths(bad_tree, "canary.scoring") == [
        "canary.scoring -> canary.chaos.leases -> canary.chaos -> canary.chaos.views -> django"
    ]


def main() -> None:
    """Print the graph between packages and apps, with one example import per edge."""
    graph = package_graph(ROOT)
    for a in sorted(graph):
        for b in sorted(graph[a]):
            edges = graph[a][b]
            first = edges[0]
            print(f"{a:10} -> {b:10} {len(edges):4} imports  e.g. {first.source}:{first.line}")
    print("kiln -> app (beyond audit.record):")
    for a, b in sorted(kiln_app_imports(ROOT)):
        print(f"  {a} -> {b}")
    print("circles between packages/apps:", sorted(circle_edges(graph)) or "none")
    for a, b in sorted(circle_imports(graph)):
        print(f"  {a} -> {b}")
    print("module circles:", circles(module_graph(ROOT)) or "none")


if __name__ == "__main__":
    main()
