"""Upgrades: the previous release's database migrates forward while the old code keeps reading it.

docs/operations.md ("Upgrades: expand, then contract") states the rule these tests hold: a
release's migrations only add (tables, nullable or defaulted columns, indexes), so the code of
the release before keeps working on the migrated schema during a rolling upgrade; drops and
renames wait for a later release. The first test runs it for real: the previous release's code
(from git) migrates and seeds a fresh PostgreSQL database, a process of that old code reads it
in a loop, and this release's `migrate` runs underneath; the old reader must never fail and the
new code must read the old data. The second checks every migration added since that release
against the rule, so a contracting migration cannot slip in unannounced.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.models import NOT_PROVIDED

ROOT = Path(__file__).resolve().parents[2]

# The release the upgrade starts from: main as the previous round of work left it.
PREVIOUS_RELEASE = "884e906b3ef92a75bd0ac77b40c6745880e54550"

# Operations that take something away from the old code. A migration may use one only when it is
# listed here with the reason the old code does not read what it removes.
CONTRACTING = (
    migrations.RemoveField,
    migrations.RenameField,
    migrations.DeleteModel,
    migrations.RenameModel,
    migrations.AlterModelTable,
)
ALLOWED_CONTRACTIONS: dict[str, str] = {}

# What the old code reads while the new migrations run: its main tables, through its own models.
OLD_READER = """
import os, time
from pathlib import Path
from django.contrib.auth import get_user_model
from portal.models import Environment
from canary.models import Rollout
from audit.models import OutboxEvent
from kiln.identity.models import Membership, Team
stop = Path(os.environ["KILN_UPGRADE_STOP_FILE"])
reads = 0
while not stop.exists():
    n = Environment.objects.count()
    list(Environment.objects.order_by("-created_at")[:50])
    list(Rollout.objects.all()[:50])
    list(Membership.objects.select_related("team", "user")[:50])
    Team.objects.count(); get_user_model().objects.count(); OutboxEvent.objects.count()
    reads += 1
    print(f"read {reads} environments={n}", flush=True)
    time.sleep(0.05)
print(f"done {reads}", flush=True)
"""


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


def _database_url(name: str) -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kiln")
    base = base.split("?", 1)[0]
    return f"{base.rsplit('/', 1)[0]}/{name}"


def _psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-qtAc", sql], check=True, capture_output=True)


def _manage(tree: Path, env: dict[str, str], *args: str, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def old_release(tmp_path) -> Path:
    """The previous release's tree, exported from git (no work tree of its own)."""
    tree = tmp_path / "previous-release"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS_RELEASE], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


@pytest.fixture
def upgrade_database():
    """A fresh PostgreSQL database of its own, dropped afterwards."""
    name = f"kiln_upgrade_{uuid.uuid4().hex[:8]}"
    admin = _database_url("postgres")
    _psql(admin, f'CREATE DATABASE "{name}"')
    try:
        yield _database_url(name)
    finally:
        _psql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_previous_release_keeps_reading_while_this_release_migrates(old_release, upgrade_database, tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": upgrade_database,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "upgrade-test-only"),
        "KILN_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_SETTINGS_MODULE": "kiln.settings",
    }
    env.pop("PYTHONPATH", None)
    for step in (("migrate", "--noinput"), ("seed_demo",)):
        done = _manage(old_release, env, *step)
        assert done.returncode == 0, f"old {step[0]} failed:\n{done.stdout}\n{done.stderr}"

    stop = tmp_path / "stop-reading"
    reader = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", OLD_READER],
        cwd=old_release,
        env={**env, "KILN_UPGRADE_STOP_FILE": str(stop)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []  # `shell` may print its own lines first (Django's automatic imports)
        while not (seen and seen[-1].startswith("read 1 ")):
            line = reader.stdout.readline()
            assert line, f"the old reader did not start: {seen} {reader.stderr.read()}"
            seen.append(line)
        migrated = _manage(ROOT, env, "migrate", "--noinput")
        assert migrated.returncode == 0, f"new migrate failed:\n{migrated.stdout}\n{migrated.stderr}"
        time.sleep(0.5)  # a few more reads on the migrated schema
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, f"the old code failed on the migrating schema:\n{err}"
    reads = int(out.strip().splitlines()[-1].split()[1])
    assert reads >= 2, out

    check = _manage(ROOT, env, "migrate", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    counted = _manage(
        ROOT,
        env,
        "shell",
        "-c",
        "from portal.models import Environment; from canary.models import Rollout; "
        "print(Environment.objects.count(), Rollout.objects.count())",
    )
    assert counted.returncode == 0, counted.stderr
    environments, rollouts = (int(n) for n in counted.stdout.splitlines()[-1].split())
    assert environments > 0 and rollouts > 0, "the new code does not see the old release's data"


def _migrations_since(release: str) -> list[tuple[str, str]]:
    """(app label, migration name) of every migration file added or changed since `release`."""
    changed = _git("diff", "--name-only", "--diff-filter=AM", release, "--", "*/migrations/0*.py")
    found = []
    for line in changed.split():
        path = ROOT / line
        if path.exists():
            found.append((_app_label(path.parent.parent), path.stem))
    return found


def _app_label(package: Path) -> str:
    from django.apps import apps

    for config in apps.get_app_configs():
        if Path(config.path).resolve() == package.resolve():
            return config.label
    raise AssertionError(f"no installed app at {package}")


def _contractions(migration, before=None) -> list[str]:
    """What `migration` takes away from code written for the state `before` it (a ProjectState)."""
    found = []
    for op in migration.operations:
        if isinstance(op, CONTRACTING):
            found.append(type(op).__name__)
        elif isinstance(op, migrations.AlterField) and before is not None:
            field = op.field
            required = not field.null and not field.has_default() and field.db_default is NOT_PROVIDED
            model = before.models.get((migration.app_label, op.model_name_lower))
            was_nullable = model is not None and model.fields[op.name].null
            if required and was_nullable:
                found.append(f"AlterField {op.model_name}.{op.name} to NOT NULL without a default")
    return found


def test_migrations_since_the_previous_release_only_expand():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    offending = {}
    for key in _migrations_since(PREVIOUS_RELEASE):
        before = loader.project_state(key, at_end=False)
        found = _contractions(loader.get_migration(*key), before)
        key = "/".join(key)
        if found and key not in ALLOWED_CONTRACTIONS:
            offending[key] = found
    assert not offending, (
        "these migrations take something the previous release reads (docs/operations.md, "
        f"expand then contract); list one in ALLOWED_CONTRACTIONS with its reason: {offending}"
    )


def test_the_contraction_check_catches_a_dropped_column():
    dropping = migrations.Migration("9999_drop", "portal")
    dropping.operations = [migrations.RemoveField(model_name="environmentrequest", name="justification")]
    assert _contractions(dropping) == ["RemoveField"]


def test_the_contraction_check_catches_a_column_made_required():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    last = max(name for app, name in loader.disk_migrations if app == "portal")
    state = loader.project_state(("portal", last))
    nullable = next(
        (m.name_lower, n)
        for (app, _), m in state.models.items()
        if app == "portal"
        for n, f in m.fields.items()
        if f.null and not f.has_default() and not f.is_relation
    )
    tightening = migrations.Migration("9999_tighten", "portal")
    tightening.operations = [
        migrations.AlterField(model_name=nullable[0], name=nullable[1], field=models.TextField())
    ]
    assert _contractions(tightening, state) == [
        f"AlterField {nullable[0]}.{nullable[1]} to NOT NULL without a default"
    ]
