"""Each piece of speed machinery kept on a request path has a switch to compare it with and
without (docs/operations.md, "Speed machinery: what earned its place"). Switched off, the
product answers exactly what it answers switched on; and each switch selects what it says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from bench.scheduler import extender as bench
from scheduler import scoring_kernel
from scheduler.extender import lookup
from scheduler.extender.handler import extender_call
from tests.scheduler.conftest import pod

ROOT = Path(__file__).resolve().parents[2]


def _bodies(names: list[str], seed: int) -> list[bytes]:
    """Filter and prioritize bodies over random candidate lists: known and unknown names, every
    workload class, small and large requests."""
    rng = np.random.default_rng(seed)
    bodies = []
    for workload_class, cpu in [
        ("latency-sensitive", "500m"),
        ("standard", "2"),
        ("batch", "100m"),
        (None, "6"),
    ]:
        chosen = [names[i] for i in rng.permutation(len(names))[: int(rng.integers(1, 400))]]
        candidates = [*chosen, "ghost-node"]
        body = {"Pod": pod(workload_class, cpu=cpu), "Nodes": None, "NodeNames": candidates}
        bodies.append(orjson.dumps(body))
    return bodies


def _answers(monkeypatch, *, kernel: bool, names_lookup: bool, seed: int) -> list[tuple]:
    monkeypatch.setattr(scoring_kernel, "COMPILED", kernel)
    monkeypatch.setattr(lookup, "COMPILED", names_lookup)
    answers = []
    for body in _bodies(bench.synthetic_snapshot(600, seed=seed).names, seed):
        for verb in ("filter", "prioritize"):
            # A fresh snapshot for every call: a list seen before would come from its cache.
            snapshot = bench.synthetic_snapshot(600, seed=seed)
            answers.append(extender_call(verb, body, snapshot_source=lambda s=snapshot: s))
    return answers


@pytest.mark.django_db
@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize(
    ("kernel", "names_lookup"),
    [(False, True), (True, False), (False, False)],
    ids=["no-compiled-kernel", "no-compiled-lookup", "neither"],
)
def test_the_extender_answers_the_same_bytes_without_its_compiled_parts(
    monkeypatch, seed, kernel, names_lookup
):
    compiled = _answers(monkeypatch, kernel=True, names_lookup=True, seed=seed)
    assert all(status == 200 for status, _ in compiled)
    assert any(orjson.loads(body).get("FailedNodes") for status, body in compiled[::2])
    assert _answers(monkeypatch, kernel=kernel, names_lookup=names_lookup, seed=seed) == compiled


def test_without_the_compiled_lookup_no_array_is_read_as_bytes(monkeypatch):
    table = lookup.NameTable(["a", "b"])
    assert lookup.positions(table, b'["b", "a"]').tolist() == [1, 0]
    monkeypatch.setattr(lookup, "COMPILED", False)
    assert lookup.positions(table, b'["b", "a"]') is None


def _settings_read(code: str, **env: str) -> str:
    """What a fresh process with this environment prints after loading the settings."""
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "kiln.settings",
        "DATABASE_URL": "postgres://kiln@127.0.0.1:5432/kiln",
        **env,
    }
    script = f"import django; django.setup(); {code}"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("value", "engine"),
    [("1", "kiln.postgresql"), ("0", "django.db.backends.postgresql")],
)
def test_the_deferred_rows_switch_chooses_the_database_engine(value, engine):
    read = "from django.conf import settings; print(settings.DATABASES['default']['ENGINE'])"
    assert _settings_read(read, KILN_DB_DEFER_ROWS=value) == engine


@pytest.mark.parametrize(("value", "fast"), [("1", True), ("0", False)])
def test_the_fast_reads_switch_puts_the_fast_path_before_django_or_not(value, fast):
    read = (
        "from kiln import asgi; from kiln.fast_reads import FastReads; "
        "print(isinstance(asgi.application.application_mapping['http'], FastReads))"
    )
    assert _settings_read(read, KILN_FAST_READS=value) == str(fast)
