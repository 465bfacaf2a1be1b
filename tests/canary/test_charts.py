"""The rollout charts' definitions and their tables' cells (canary/charts.py, no database)."""

from __future__ import annotations

import pytest

from canary.charts import CHARTS, NO_EVIDENCE, Series, cell, chart_tables

WEIGHT = Series("weight", "canary %", 0)
RATE = Series("canary_error_rate", "canary", 3, scale=100)
LLR = Series("llr", "LLR", 2)


@pytest.mark.parametrize(
    ("value", "series", "expected"),
    [
        (None, LLR, NO_EVIDENCE),  # a window without evidence has no statistic
        (25, WEIGHT, "25"),
        (0.00123, RATE, "0.123"),  # 0.00123 x 100 = 0.123 (%)
        (0.05, RATE, "5.000"),
        (-2.3456, LLR, "-2.35"),
        (-0.0, LLR, "0.00"),  # as JavaScript's toFixed writes negative zero
        (-0.0001, LLR, "-0.00"),  # and as it writes a small negative number
    ],
    ids=["null", "weight", "rate-in-percent", "rate-whole", "llr", "negative-zero", "small-neg"],
)
def test_a_cell_is_the_value_scaled_to_fixed_decimals(value, series, expected):
    assert cell(value, series) == expected


def test_every_series_names_a_field_of_a_tick_point():
    fields = {
        "tick", "weight", "canary_error_rate", "baseline_error_rate", "llr", "llr_lower",
        "llr_upper", "cusum", "cusum_threshold",
    }  # fmt: skip
    assert [c.id for c in CHARTS] == ["weight", "errors", "sprt", "cusum"]
    assert {s.key for c in CHARTS for s in c.series} <= fields


def test_tables_have_one_row_a_tick_in_the_order_given():
    ticks = [
        {"tick": 1, "weight": 10, "baseline_error_rate": 0.01, "canary_error_rate": None,
         "llr": 0.5, "llr_upper": 6.9, "llr_lower": -2.9, "cusum": 0.0, "cusum_threshold": 5.0},
        {"tick": 2, "weight": 25, "baseline_error_rate": 0.02, "canary_error_rate": 0.03,
         "llr": -1.25, "llr_upper": 6.9, "llr_lower": -2.9, "cusum": 1.5, "cusum_threshold": 5.0},
    ]  # fmt: skip
    tables = {t["chart"].id: t["rows"] for t in chart_tables(ticks)}
    assert tables["weight"] == [{"tick": 1, "cells": ["10"]}, {"tick": 2, "cells": ["25"]}]
    assert tables["errors"][0]["cells"] == ["1.000", NO_EVIDENCE]
    assert tables["sprt"][1]["cells"] == ["-1.25", "6.90", "-2.90"]
    assert tables["cusum"][1]["cells"] == ["1.50", "5.00"]
    assert all(rows == [] for rows in (t["rows"] for t in chart_tables([])))


def test_traffic_moved_after_the_last_tick_is_a_now_row_in_the_weight_table_only():
    ticks = [{"tick": 1, "weight": 10, "baseline_error_rate": None, "canary_error_rate": None,
              "llr": None, "llr_upper": 6.9, "llr_lower": -2.9, "cusum": 0.0,
              "cusum_threshold": 5.0}]  # fmt: skip
    tables = {t["chart"].id: t["rows"] for t in chart_tables(ticks, weight=100)}
    assert tables["weight"] == [{"tick": 1, "cells": ["10"]}, {"tick": "now", "cells": ["100"]}]
    assert [len(rows) for rows in tables.values()] == [2, 1, 1, 1]
    # Still at the last tick's weight, or no tick yet: nothing moved.
    assert len(chart_tables(ticks, weight=10)[0]["rows"]) == 1
    assert chart_tables([], weight=100)[0]["rows"] == []
