"""kiln.params: any string in gives a value in range or a ParamError, never another exception."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kiln import params
from kiln.params import ParamError

TEXT = st.text(st.characters(codec=None), max_size=60) | st.text(
    "0123456789-+:TZ .,", max_size=40
)
MOMENT_LIKE = st.builds(
    lambda y, mo, d, h, mi, s, sign, oh, om: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{sign}{oh:02d}:{om:02d}",
    st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 25),
    st.integers(0, 61), st.integers(0, 61), st.sampled_from(["+", "-", " "]),
    st.integers(0, 25), st.integers(0, 61),
)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.none() | TEXT | MOMENT_LIKE)
@example("2026-02-30")
@example("9999-12-31T23:59:59-14:00")
@example("0001-01-01T00:00:00+14:00")
@example("2026-01-01T24:00:00Z")
@example("2026-01-01T10:00:00+24:00")
@example("٢٠٢٦-٠١-٠١")
@example("2026-01-01\x00")
def test_parse_moment_gives_an_aware_utc_datetime_or_a_param_error(value):
    try:
        moment = params.parse_moment(value, "from")
    except ParamError as exc:
        assert exc.name == "from" and exc.message
        assert exc.as_extra()["fields"] == {"from": [exc.message]}
        return
    if moment is None:
        assert not value
        return
    assert moment.tzinfo is UTC
    assert datetime(1, 1, 1, tzinfo=UTC) <= moment <= datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.integers(-(23 * 60 + 59), 23 * 60 + 59),
)
def test_a_valid_iso_datetime_round_trips_to_the_same_instant(naive, offset_minutes):
    tz = timezone(timedelta(minutes=offset_minutes))
    moment = naive.replace(microsecond=0, tzinfo=tz)
    assert params.parse_moment(moment.isoformat(), "to") == moment.astimezone(UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-01T10:30", datetime(2026, 3, 1, 10, 30, tzinfo=UTC)),  # naive means UTC
        ("2026-03-01T10:30:00Z", datetime(2026, 3, 1, 10, 30, tzinfo=UTC)),
        # 10:30 at +02:00 is 08:30 UTC; an unencoded '+' arrives as a space.
        ("2026-03-01T10:30:00 02:00", datetime(2026, 3, 1, 8, 30, tzinfo=UTC)),
        ("2026-03-01T10:30:00.5-01:30", datetime(2026, 3, 1, 12, 0, 0, 500000, tzinfo=UTC)),
        ("", None),
        (None, None),
    ],
    ids=["date", "naive", "zulu", "plus-as-space", "fraction-negative-offset", "empty", "absent"],
)
def test_parse_moment_worked_cases(value, expected):
    assert params.parse_moment(value, "from") == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("2026-02-30", "not a calendar date"),
        ("9999-12-31T23:59:59-14:00", "outside years 1..9999"),
        ("0001-01-01T00:00:00+00:01", "outside years 1..9999"),
        ("2026-01-01T23:60", "not a time of day"),
        ("2026-01-01T10:00+24:00", "UTC offset"),
        ("yesterday", "ISO 8601"),
    ],
)
def test_parse_moment_names_the_reason(value, reason):
    with pytest.raises(ParamError, match=reason):
        params.parse_moment(value, "from")


@settings(max_examples=600, deadline=None)
@given(
    st.none()
    | TEXT
    | st.integers(-(10**30), 10**30).map(str)
    | st.integers(0, 600).map(lambda n: f"{'0' * (n % 7)}{n}"),
    st.integers(1, 10_000),
)
@example("99999999999999999999", 500)
@example("1e3", 500)
@example("５", 500)
@example(" 5", 500)
@example("9" * 5000, 500)
def test_parse_limit_is_in_range_or_a_param_error(value, maximum):
    try:
        limit = params.parse_limit(value, maximum=maximum, default=min(50, maximum))
    except ParamError as exc:
        assert exc.name == "limit" and exc.allowed == f"1..{maximum}"
        return
    assert isinstance(limit, int) and 1 <= limit <= maximum
    if value:
        assert limit == int(value)


@settings(max_examples=400, deadline=None)
@given(st.none() | TEXT | st.integers(-(10**25), 10**25).map(str))
def test_parse_offset_is_in_range_or_a_param_error(value):
    try:
        offset = params.parse_offset(value)
    except ParamError as exc:
        assert exc.name == "offset" and "0.." in exc.allowed
        return
    assert 0 <= offset <= params.MAX_OFFSET


def test_parse_page_defaults_and_bounds():
    assert params.parse_page(None, None) == params.Page(limit=50, offset=0)
    assert params.parse_page("500", "2147483647") == params.Page(limit=500, offset=2**31 - 1)
    with pytest.raises(ParamError, match="limit"):
        params.parse_page("501", None)
    with pytest.raises(ParamError, match="offset"):
        params.parse_page("1", "2147483648")


@settings(max_examples=300, deadline=None)
@given(st.none() | st.text(max_size=300))
def test_parse_text_returns_storable_text_or_a_param_error(value):
    try:
        text = params.parse_text(value, "actor", max_length=200)
    except ParamError as exc:
        assert exc.name == "actor"
        assert "\x00" in value or len(value) > 200 or any(
            "\ud800" <= c <= "\udfff" for c in value
        )
        return
    assert "\x00" not in text and len(text) <= 200


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": [1, 2.5, "x"]}, None),
        ({"a\x00": 1}, "NUL"),
        ([{"b": "x\x00"}], "NUL"),
        ({"x": float("inf")}, "finite"),
        (eval("[" * 70 + "]" * 70), "nested"),  # noqa: S307 - a literal, 70 levels deep
    ],
    ids=["plain", "nul-key", "nul-value", "infinity", "too-deep"],
)
def test_json_problem(value, problem):
    found = params.json_problem(value)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize(
    ("internal_type", "bounds"),
    [
        ("PositiveIntegerField", (0, 2**31 - 1)),
        ("PositiveSmallIntegerField", (0, 2**15 - 1)),
        ("BigIntegerField", (-(2**63), 2**63 - 1)),
        ("CharField", None),
    ],
)
def test_column_range_is_postgresqls(internal_type, bounds):
    assert params.column_range(internal_type) == bounds
