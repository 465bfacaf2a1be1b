"""Product apps hold the product: no product module imports the bench app or the test support,
no product app carries a benchmark, load-test or demo command, and `manage.py help` without the
development requirements (as in the image) lists none of them.

The imports are read with `ast` from every module of the product packages, migrations included,
and an import inside a function counts as much as one at the top: a deferred import of a
benchmark still ships it. The checkers are also run on a small tree that breaks each rule, so
they are seen to fail.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
# What the image copies (deploy/kiln/Dockerfile): the product, and nothing else of Python.
PRODUCT = ("kiln", "audit", "portal", "scheduler", "canary")
# Development-only packages: benchmarks, load tests and demos; the stand-ins and launchers
# the tests (and the benchmarks) run against.
DEVELOPMENT = ("bench", "tests")
# A benchmark, load test, demo or development-only server, by its command's name. Standalone
# mode's demo data (`seed_demo`) is the product's: `make run` and the image's standalone use it.
NOT_PRODUCT_COMMAND = re.compile(r"(_bench$|^loadtest$|_demo$|_fault_matrix$|_dev_)")
PRODUCT_COMMANDS_NAMED_LIKE_DEMOS = {"seed_demo"}


def development_imports(root: Path, packages: tuple[str, ...] = PRODUCT) -> list[str]:
    """`path:line module` for every import of a development-only package in `packages`."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in DEVELOPMENT:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def not_product_commands(root: Path, packages: tuple[str, ...] = PRODUCT) -> list[str]:
    """The management commands of `packages` named as benchmarks, load tests or demos are."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("management/commands/*.py")):
            name = path.stem
            if NOT_PRODUCT_COMMAND.search(name) and name not in PRODUCT_COMMANDS_NAMED_LIKE_DEMOS:
                found.append(str(path.relative_to(root)))
    return found


def listed_commands(help_text: str) -> set[str]:
    """The command names `manage.py help` prints (indented under their app's heading)."""
    return {line.strip() for line in help_text.splitlines() if line.startswith("    ")}


def manage_py_help(*, development_requirements: bool) -> set[str]:
    """The commands `manage.py help` lists, in a process of its own; without the development
    requirements, `pytest` cannot be imported there, as in the image (its lock has no pytest)."""
    block = "" if development_requirements else "sys.modules['pytest'] = None; "
    code = (
        f"import runpy, sys; {block}sys.argv = ['manage.py', 'help']; "
        "runpy.run_path('manage.py', run_name='__main__')"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kiln.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return listed_commands(done.stdout)


def test_product_code_imports_no_bench_and_no_test_support():
    assert development_imports(ROOT) == []


def test_product_apps_carry_no_benchmark_load_test_or_demo_command():
    assert not_product_commands(ROOT) == []


def test_the_bench_app_is_installed_only_with_the_development_requirements():
    assert "bench.apps.BenchConfig" in settings.INSTALLED_APPS  # the tests run with them
    product = manage_py_help(development_requirements=False)
    development = manage_py_help(development_requirements=True)
    # The product's own commands are there either way ...
    for command in ("audit_writer", "scheduler_extender", "chaos_reaper", "seed_demo"):
        assert command in product and command in development, command
    # ... the benchmarks, load test and demos only with the development requirements.
    assert {"loadtest", "audit_bench", "canary_dev_traffic"} <= development
    leaked = {c for c in product if NOT_PRODUCT_COMMAND.search(c)}
    assert leaked <= PRODUCT_COMMANDS_NAMED_LIKE_DEMOS, sorted(leaked)


def dockerfile_sources(text: str) -> list[str]:
    """The build-context paths a Dockerfile's COPY lines take (not those copied between stages)."""
    sources = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from=") for w in words):
            sources += [w.rstrip("/") for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_the_image_copies_the_product_and_no_development_tree():
    sources = dockerfile_sources((ROOT / "deploy/kiln/Dockerfile").read_text())
    assert set(PRODUCT) <= set(sources)
    assert not [s for s in sources if s.split("/")[0] in DEVELOPMENT or s == "."], sources
    # The build context leaves the development trees out too, and keeps what the image copies.
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert set(DEVELOPMENT) <= ignored
    assert not [s for s in sources if s.split("/")[0] in ignored], sources


# --- the checkers on a small tree that breaks each rule ---------------------------------


def test_the_checkers_find_a_development_import_and_a_benchmark_command(tmp_path):
    files = {
        "kiln/__init__.py": "",
        "kiln/fine.py": "import json\nfrom kiln import errors\nfrom . import bench\n",
        "kiln/late.py": "def f():\n    from bench.portal import harness\n",
        "portal/top.py": "import tests.support.kube_sim as k\n",
        "portal/management/commands/reap_expired.py": "",
        "portal/management/commands/seed_demo.py": "",
        "portal/management/commands/provision_bench.py": "",
        "canary/management/commands/canary_dev_traffic.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert development_imports(tmp_path, ("kiln", "portal")) == [
        "kiln/late.py:2 bench.portal",
        "portal/top.py:1 tests.support.kube_sim",
    ]
    assert not_product_commands(tmp_path, ("portal", "canary")) == [
        "portal/management/commands/provision_bench.py",
        "canary/management/commands/canary_dev_traffic.py",
    ]
    assert listed_commands("[bench]\n    audit_bench\n\n[kiln]\n    seed_demo\n") == {
        "audit_bench",
        "seed_demo",
    }
    dockerfile = "FROM x AS b\nCOPY a.lock /tmp/a.lock\nCOPY kiln kiln\nCOPY --from=b /app /app\n"
    assert dockerfile_sources(dockerfile) == ["a.lock", "kiln"]
