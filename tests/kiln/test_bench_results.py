"""Every committed benchmark result parses, names the command that printed it, a machine and a date.

The checker is run on the files under `bench/results/` and on bad samples, so it is seen
to fail; the runner `python -m kiln.benchjson` that `make bench` uses is run on small
commands.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from kiln import benchjson

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
APPS = ("kiln", "portal", "scheduler", "canary", "audit", "bench")  # bench: the benchmarks


def management_commands() -> set[str]:
    """Names of the management commands in the tree (`<package>/management/commands/<name>.py`)."""
    found = set()
    for app in APPS:
        for path in (ROOT / app).rglob("management/commands/*.py"):
            if path.stem != "__init__":
                found.add(path.stem)
    return found


# pytest's options that take the next word as their value (`-p no:cacheprovider`).
VALUED = frozenset({"-p", "-k", "-m", "-n", "-c", "-o", "--dist", "--durations"})


def named_target(command: str) -> str | None:
    """What `command` runs, if it exists in the tree; None if it names nothing that exists.

    Understood: `... manage.py <command> ...`, `... python -m <module> ...` (a module of the
    tree, or pytest with a test file that exists) and `... <script>.py ...` (a file that exists).
    Environment assignments and wrappers (`flock LOCK`) before the program are skipped.
    """
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word == "manage.py" or word.endswith("/manage.py"):
            name = words[i + 1] if i + 1 < len(words) else ""
            return f"manage.py {name}" if name in management_commands() else None
        if word == "-m" and i + 1 < len(words):
            module = words[i + 1]
            if module == "pytest":
                after = words[i + 2 :]
                paths = [
                    w.split("::")[0]
                    for k, w in enumerate(after)
                    if not w.startswith("-") and (k == 0 or after[k - 1] not in VALUED)
                ]
                exists = [p for p in paths if (ROOT / p).exists()]
                return f"pytest {' '.join(exists)}" if exists and exists == paths else None
            base = ROOT / Path(*module.split("."))
            exists = base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()
            return f"python -m {module}" if exists else None
    for word in words:
        if word.endswith(".py") and "=" not in word:
            return word if _tree_script(word) else None
    return None


def _tree_script(word: str) -> bool:
    """Whether `word` names a script of the tree: a path relative to its root, or an absolute
    path into a copy of the tree (whatever the machine's /tmp holds today), ending in one."""
    path = Path(word)
    if not path.is_absolute():
        return (ROOT / path).is_file()
    parts = path.parts
    return any((ROOT / Path(*parts[k:])).is_file() for k in range(1, len(parts) - 1))


def check(text: str) -> list[str]:
    """Why `text` is not a valid committed result; empty when it is."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc}"]
    out = benchjson.problems(data)
    if isinstance(data, dict) and isinstance(data.get("command"), str) and data["command"]:
        if named_target(data["command"]) is None:
            out.append(f"'command' {data['command']!r} names no command or script of the tree")
    return out


def committed() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_file())


def test_results_are_committed():
    assert committed(), "bench/results/ holds no results"


@pytest.mark.parametrize("path", committed(), ids=lambda p: p.name)
def test_committed_result_names_its_command_machine_and_date(path):
    assert path.suffix == ".json", f"{path.name}: results are JSON files"
    assert check(path.read_text()) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "the top level is a JSON list"),
        ('{"machine": {"nproc": 2}, "date": "2026-12-01T10:00:00Z"}', "no 'command'"),
        ('{"command": "python manage.py audit_bench", "date": "2026-12-01"}', "no 'machine'"),
        ('{"command": "python manage.py audit_bench", "machine": "vm"}', "no 'date'"),
        (
            '{"command": "python manage.py audit_bench", "machine": "vm", "date": "yesterday"}',
            "'date' 'yesterday' is not ISO 8601",
        ),
        (
            '{"command": "python manage.py no_such_bench --json", "machine": "vm", '
            '"date": "2026-12-01T10:00:00+00:00"}',
            "names no command or script of the tree",
        ),
        (
            '{"command": "python -m pytest tests/kiln/test_gone.py", "machine": "vm", '
            '"date": "2026-12-01T10:00:00+00:00"}',
            "names no command or script of the tree",
        ),
        (
            '{"command": "python /tmp/copy/tree/bench/no_such_script.py", "machine": "vm", '
            '"date": "2026-12-01T10:00:00+00:00"}',
            "names no command or script of the tree",
        ),
    ],
    ids=[
        "not-json",
        "not-object",
        "no-command",
        "no-machine",
        "no-date",
        "bad-date",
        "unknown-command",
        "missing-test-file",
        "absolute-path-to-no-script",
    ],
)
def test_checker_rejects_a_bad_sample(text, problem):
    assert any(problem in p for p in check(text)), check(text)


@pytest.mark.parametrize(
    ("command", "target"),
    [
        (
            "flock /tmp/kiln-bench.lock .venv/bin/python manage.py extender_bench --json",
            "manage.py extender_bench",
        ),
        (
            "KILN_SCHEMATHESIS_SUMMARY=<file> python -m pytest tests/kiln/test_schemathesis.py",
            "pytest tests/kiln/test_schemathesis.py",
        ),
        (
            "python -m pytest -p no:cacheprovider -q tests/kiln/test_docs.py",
            "pytest tests/kiln/test_docs.py",
        ),
        ("python -m pytest -p no:cacheprovider tests/kiln/test_gone.py", None),
        (
            "python -m audit.export.verify export.jsonl --public-key k",
            "python -m audit.export.verify",
        ),
        ("python -m kiln.benchjson out.json -- true", "python -m kiln.benchjson"),
        ("python -m no.such.module", None),
        ("sh -c 'echo {}'", None),
    ],
    ids=[
        "manage-py",
        "pytest",
        "pytest-option-values",
        "pytest-file-gone",
        "module",
        "this-runner",
        "unknown-module",
        "no-program",
    ],
)
def test_named_target(command, target):
    assert named_target(command) == target


def test_stamped_puts_command_machine_and_date_first_and_keeps_the_commands_machine():
    result = benchjson.stamped(
        {"machine": {"load_1m": 1.5}, "p99_ms": 0.9},
        name="extender_bench",
        date="2026-12-01T10:00:00+00:00",
        argv=["manage.py", "extender_bench", "--nodes", "10"],
    )
    assert list(result)[:3] == ["command", "machine", "date"]
    assert result["command"] == "python manage.py extender_bench --nodes 10"
    assert result["machine"]["load_1m"] == 1.5 and result["machine"]["nproc"]
    assert result["p99_ms"] == 0.9
    # Called in process (another program's argv): named without arguments.
    assert benchjson.command_line("audit_bench", ["pytest", "-q"]) == "python manage.py audit_bench"


def test_machine_carries_a_cpu_reference_that_grows_with_the_work(monkeypatch):
    """The reference is a measurement: a machine made to do the work four times reports more."""
    once = benchjson.cpu_reference_ms()
    assert benchjson.machine()["cpu_reference_ms"] > 0 and once > 0
    single = benchjson._reference_once
    monkeypatch.setattr(benchjson, "_reference_once", lambda: sum(single() for _ in range(4)))
    assert benchjson.cpu_reference_ms() > 1.5 * once


def test_runner_fills_in_what_a_command_did_not_print(tmp_path):
    out = tmp_path / "r.json"
    code = benchjson.main(
        [str(out), "--", sys.executable, "-c", "print('progress'); print('{\"x\": 1}')"]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert data["x"] == 1
    assert benchjson.problems(data) == []
    assert data["command"].startswith(shlex.quote(sys.executable) + " -c ")


def test_runner_keeps_what_a_command_printed(tmp_path):
    out = tmp_path / "r.json"
    printed = {"command": "python manage.py audit_bench", "machine": "m", "date": "2026-12-01"}
    code = benchjson.main([str(out), "--", sys.executable, "-c", f"print({json.dumps(printed)!r})"])
    assert code == 0
    assert json.loads(out.read_text()) == printed


@pytest.mark.parametrize(
    "script", ["import sys; sys.exit(3)", "print('no json here')"], ids=["fails", "no-json"]
)
def test_runner_writes_nothing_for_a_failed_run(tmp_path, script):
    out = tmp_path / "r.json"
    assert benchjson.main([str(out), "--", sys.executable, "-c", script]) != 0
    assert not out.exists()


def test_an_absolute_path_into_a_copy_of_the_tree_names_its_script():
    """Results run from a copy of the tree name it by that copy's path, gone since."""
    assert named_target("python /tmp/gone-copy/tree/bench/suite_time.py --rounds 1")
    assert named_target("python /tmp/gone-copy/suite_time.py") is None
