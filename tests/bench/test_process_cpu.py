"""bench/process_cpu.py: a run's CPU by process name, band and the largest processes."""

from __future__ import annotations

from bench.process_cpu import summary


def _record(name: str, cpu: float, elapsed: float = 1.0) -> dict:
    return {"name": name, "cpu": cpu, "elapsed": elapsed, "start": "Mon Dec  7 01:23:45 2026"}


def test_cpu_is_summed_per_name_largest_first_and_counted_by_band():
    found = [_record("python", 3.0), _record("python", 0.1), _record("postgres", 0.3),
             _record("HangWatcher", 70.0, 500.0)]  # fmt: skip
    result = summary(found, longest=2)
    assert result["cpu_seconds"] == 73.4 and result["processes"] == 4
    assert [(n["name"], n["processes"], n["cpu_seconds"]) for n in result["by_name"]] == [
        ("HangWatcher", 1, 70.0), ("python", 2, 3.1), ("postgres", 1, 0.3)
    ]  # fmt: skip
    assert result["by_cpu_band"] == {"<0.2s": 1, "<0.5s": 1, "<4s": 1, ">=4s": 1}
    assert [r["cpu"] for r in result["largest"]] == [70.0, 3.0]
