"""kiln is the ground floor: no module under kiln/ imports an app, except audit's `record`.

Read from the code's own imports with `ast`, at module level and inside
functions alike; the apps' routes, websocket routes and demo seeds reach kiln by
name (settings and django.apps), never by an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.urls import reverse

import audit.seed
import canary.chaos.routing
import canary.routing
import canary.seed
import portal.routing
import portal.seed
import scheduler.seed
from kiln import asgi, seed, urls

KILN = Path(__file__).resolve().parents[2] / "kiln"
APPS = frozenset({"portal", "canary", "scheduler", "chaos", "audit"})
# The spine every layer records to: `import audit` (to call audit.record) or `from audit import record`.
ALLOWED = frozenset({("import", "audit"), ("from", "audit", "record")})


def imports_of(tree: ast.AST) -> list[tuple[int, tuple[str, ...]]]:
    """(line, import) for every import in a module: ("import", name) or ("from", module, name)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, ("import", alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, ("from", node.module, alias.name)) for alias in node.names]
    return found


def app_imports(source: str) -> list[str]:
    """The imports of an app in `source` that kiln may not make, as `line: statement`."""
    bad = []
    for line, imported in imports_of(ast.parse(source)):
        if imported[1].split(".")[0] in APPS and imported not in ALLOWED:
            kind, module, *name = imported
            bad.append(f"{line}: {kind} {module}" + (f" import {name[0]}" if name else ""))
    return bad


MODULES = sorted(KILN.rglob("*.py"))


def test_the_scan_sees_kiln_modules_and_catches_every_form_of_app_import():
    assert len(MODULES) > 30 and KILN / "urls.py" in MODULES
    # Each of these must be caught, wherever it stands.
    for source in (
        "from portal.models import Team",
        "import canary.urls",
        "import scheduler",
        "def f():\n    from chaos import services\n",
        "class A:\n    def m(self):\n        import portal.delivery as d\n",
        "from audit.models import ChainEvent",
        "import audit.urls",
    ):
        assert app_imports(source), source
    assert app_imports("import audit\nfrom audit import record\nimport kiln.api\n") == []


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(KILN.parent)))
def test_kiln_module_imports_no_app(module: Path):
    assert app_imports(module.read_text()) == []


def test_the_apps_reach_kiln_by_name_routes_websockets_and_seeds():
    assert [m.app_name for m in urls.APPS] == ["portal", "scheduler", "canary", "chaos", "audit"]
    assert reverse("portal:environment-list") and reverse("audit-api:events")
    assert reverse("chaos:experiment-list")
    # The apps' routes, then the catch-all that refuses any other path (kiln/websocket_not_found.py).
    assert asgi.websocket_urlpatterns[:-1] == (
        canary.routing.websocket_urlpatterns
        + portal.routing.websocket_urlpatterns
        + canary.chaos.routing.websocket_urlpatterns
    )
    assert asgi.websocket_urlpatterns[-1] is asgi.NOT_FOUND_ROUTE
    # In INSTALLED_APPS order: scheduler's prices exist before portal's cost estimates.
    assert seed.app_seeds() == [
        audit.seed.seed_demo,
        scheduler.seed.seed_demo,
        portal.seed.seed_demo,
        canary.seed.seed_demo,
    ]
