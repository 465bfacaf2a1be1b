"""The audit app's layout (docs/audit.md, "Where the code lives"): Django's app shape at the top,
the rest in packages by concern, modules near ~400 lines, and names that outlive a move."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AUDIT = ROOT / "audit"

# Django's app shape, plus the triggers the migrations install beside the models.
APP_SHAPE = {
    "__init__.py", "admin.py", "api.py", "apps.py", "models.py", "selectors.py", "seed.py",
    "tasks.py", "triggers.py", "urls.py", "views.py",
}  # fmt: skip
PACKAGES = {
    "chain", "explorer", "export", "home", "management", "migrations", "services",
    "templatetags", "tree", "witness",
}  # fmt: skip
# One file on purpose: an auditor copies it alone (its docstring says so).
LONG_ON_PURPOSE = {"audit/tree/tlog_verify.py"}


def stray_modules(app: Path) -> list[str]:
    """Modules at the top of the app that are neither the app's shape nor one of its packages."""
    return sorted(
        path.name
        for path in app.iterdir()
        if (path.suffix == ".py" and path.name not in APP_SHAPE)
        or (path.is_dir() and path.name != "__pycache__" and path.name not in PACKAGES)
    )


def test_the_top_of_the_app_holds_its_shape_and_its_packages_only():
    assert stray_modules(AUDIT) == []


def test_a_flat_module_at_the_top_is_found(tmp_path):
    for name in ("models.py", "tlog_cache.py", "tree_verification.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "tree").mkdir()
    (tmp_path / "odds").mkdir()
    assert stray_modules(tmp_path) == ["odds", "tlog_cache.py", "tree_verification.py"]


def test_every_module_stays_near_400_lines():
    long = {
        str(path.relative_to(ROOT))
        for path in AUDIT.rglob("*.py")
        if "migrations" not in path.parts and len(path.read_text().splitlines()) > 400
    }
    assert long <= LONG_ON_PURPOSE, sorted(long - LONG_ON_PURPOSE)


def test_celery_task_names_are_the_broker_contract_not_module_paths():
    from kiln.celery import app

    app.loader.import_default_modules()
    assert {"audit.tasks.relay_outbox", "audit.verify_chain"} <= set(app.tasks)


def test_the_offline_verifiers_run_as_modules_without_settings():
    for module in ("audit.export.verify", "audit.tree.tlog_verify"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, (module, result.stderr)
        assert "usage:" in result.stdout
