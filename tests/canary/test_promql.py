"""Query templates (canary.promql): the placeholder syntax, what is refused, and properties of rendering."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from canary import promql
from canary.metrics import DEFAULT_QUERIES

VALUES = {
    "service": "checkout",
    "namespace": "shop",
    "host": "checkout.shop.svc.cluster.local",
    "version": "v2",
    "window": "60s",
}


def lex_strings(query: str) -> list[str]:
    """The decoded string literals of a PromQL query, lexed as Prometheus' Go lexer does.

    Written independently of canary.promql: escapes are a b f n r t v, backslash, the
    opening quote, \\xHH, \\uXXXX, \\UXXXXXXXX and three octal digits; a raw newline or an
    unknown escape inside a quoted string is an error, as it is for Prometheus.
    """
    found: list[str] = []
    i = 0
    simple = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
    while i < len(query):
        c = query[i]
        if c == "#":
            end = query.find("\n", i)
            i = len(query) if end < 0 else end
            continue
        if c == "`":
            end = query.index("`", i + 1)
            found.append(query[i + 1 : end])
            i = end + 1
            continue
        if c not in "\"'":
            i += 1
            continue
        j, buf = i + 1, []
        while True:
            d = query[j]  # IndexError: unterminated
            if d == "\n":
                raise ValueError("newline in a quoted string")
            if d == c:
                break
            if d != "\\":
                buf.append(d)
                j += 1
                continue
            e = query[j + 1]
            if e in simple:
                buf.append(simple[e])
                j += 2
            elif e in ("\\", c):
                buf.append(e)
                j += 2
            elif e in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[e]
                digits = query[j + 2 : j + 2 + width]
                if len(digits) != width or not all(h in "0123456789abcdefABCDEF" for h in digits):
                    raise ValueError("bad hex escape")
                code = int(digits, 16)
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise ValueError("invalid code point")
                buf.append(chr(code))
                j += 2 + width
            elif e in "01234567":
                digits = query[j + 1 : j + 4]
                if len(digits) != 3 or not all(h in "01234567" for h in digits):
                    raise ValueError("bad octal escape")
                buf.append(chr(int(digits, 8)))
                j += 4
            else:
                raise ValueError(f"unknown escape \\{e}")
        found.append("".join(buf))
        i = j + 1
    return found


# --- the syntax --------------------------------------------------------------------------------


def test_the_default_queries_are_templates_and_render_to_istio_promql():
    rendered = promql.render(DEFAULT_QUERIES["errors"], VALUES)
    assert rendered == (
        'istio_requests_total{reporter="destination",destination_service_name="checkout",'
        'destination_service_namespace="shop",destination_version="v2",'
        'response_code=~"5.."}'
    )
    for template in DEFAULT_QUERIES.values():
        promql.validate(template)


def test_spaces_inside_the_braces_and_single_quotes_are_accepted():
    template = "rate(x{a='{{ service }}', h=\"{{host}}\"}[{{ window }}] offset {{window}})"
    assert promql.render(template, VALUES) == (
        "rate(x{a='checkout', h=\"checkout.shop.svc.cluster.local\"}[60s] offset 60s)"
    )


@pytest.mark.parametrize(
    "template, reason",
    [
        ('x{a="{service.__class__}"}', "Python format field"),
        ("x{service.__class__}", "Python format field"),
        ("x[{window:>2000000000}]", "Python format field"),
        ('x{a="{service!r}"}', "Python format field"),
        ('x{a="{0}"}', "Python format field"),
        ('x{a="{service[0]}"}', "Python format field"),
        ('x{{a="{service}"}}', "not a placeholder"),
        ('x{a="{{service.__class__}}"}', "attribute access"),
        ('x{a="{{service[0]}}"}', "indexing"),
        ('x{a="{{service()}}"}', "calls"),
        ('x{a="{{service!r}}"}', "conversions"),
        ("x[{{window:>2000000000}}]", "format specs"),
        ('x{a="{{service|upper}}"}', "filters"),
        ('x{a="{{secret}}"}', "unknown placeholder {{secret}}"),
        ('x{a="{{__class__}}"}', "unknown placeholder"),
        ('x{a="{{service"}', "never closed"),
        ("x[{{service}}]", "inside a quoted string"),
        ('x{a="{{window}}"}', "is a duration"),
        ("x{a=`{{service}}`}", "raw"),
        ('# {{service}}\nx{a="b"}', "comments"),
        ('x{a="b}', "unterminated"),
        ('x{a="b\\', "unterminated"),
        ('x{a="b\nc"}', "span lines"),
        ("x}}", "without '{{'"),
        ("", "empty"),
        ("x" * (promql.MAX_TEMPLATE_CHARS + 1), "at most"),
        ("+".join(['x{a="{{service}}"}'] * (promql.MAX_SLOTS + 1)), "placeholders"),
    ],
)
def test_refused_templates_say_why(template, reason):
    with pytest.raises(promql.TemplateError) as refused:
        promql.validate(template)
    assert reason in str(refused.value)


def test_promql_matchers_and_regex_anchors_are_not_mistaken_for_fields():
    for template in (
        'x{job!="a",b=~"c$",d!~"^e"}[{{window}}]',
        'x{a="{{service}}"} or on() vector(0)',
        'x{"quoted.name"="y"}',
        "sum by (le) (x)",
    ):
        promql.validate(template)


def test_a_value_is_never_a_template_itself():
    # A value that looks like a placeholder or a format field stays text: nothing is re-expanded.
    values = {**VALUES, "service": "{{namespace}}{service.__class__}"}
    (literal,) = lex_strings(promql.render('x{a="{{service}}"}', values))
    assert literal == "{{namespace}}{service.__class__}"


def test_values_that_are_not_strings_are_refused_without_being_touched():
    class Trap:
        def __format__(self, spec):  # pragma: no cover - must never run
            raise AssertionError("formatted")

        __str__ = __repr__ = __format__

    with pytest.raises(promql.TemplateError):
        promql.render('x{a="{{service}}"}', {**VALUES, "service": Trap()})
    with pytest.raises(promql.TemplateError, match="no value"):
        promql.render('x{a="{{service}}"}', {})


@pytest.mark.parametrize("window", ["2000000000s", "60", "1m30s", "60s]) or vector(1", " 60s", ""])
def test_the_window_must_be_one_duration(window):
    with pytest.raises(promql.TemplateError, match="duration"):
        promql.render("x[{{window}}]", {**VALUES, "window": window})


def test_a_regex_matcher_gets_the_value_as_a_literal_pattern():
    rendered = promql.render('x{a=~"{{version}}"}', {**VALUES, "version": "v1.2+(x)"})
    (pattern,) = lex_strings(rendered)
    assert pattern == r"v1\.2\+\(x\)"
    assert re.fullmatch(pattern, "v1.2+(x)") and not re.fullmatch(pattern, "v1x2+(x)")


def test_a_lone_surrogate_and_an_overlong_value_are_refused():
    with pytest.raises(promql.TemplateError, match="surrogate"):
        promql.render('x{a="{{service}}"}', {**VALUES, "service": "a\ud800"})
    with pytest.raises(promql.TemplateError, match="longer"):
        promql.render('x{a="{{service}}"}', {**VALUES, "service": "a" * 254})


# --- properties -------------------------------------------------------------------------------

values = st.text(max_size=promql.MAX_VALUE_CHARS)
TEMPLATE = (
    "sum(x{a=\"{{service}}\",b='{{version}}',c=~\"{{namespace}}\",d!~'{{host}}'}[{{window}}])"
)


@settings(max_examples=500)
@given(service=values, version=values, namespace=values, host=values)
def test_no_value_can_leave_its_string_literal(service, version, namespace, host):
    """Whatever the values, the query has exactly its four string literals, each decoding to its value."""
    given_values = {
        "service": service,
        "version": version,
        "namespace": namespace,
        "host": host,
        "window": "60s",
    }
    rendered = promql.render(TEMPLATE, given_values)
    decoded = lex_strings(rendered)
    assert decoded[:2] == [service, version] and len(decoded) == 4
    # The regex matchers match their value literally, and only it.
    assert re.fullmatch(decoded[2], namespace, re.S)
    assert re.fullmatch(decoded[3], host, re.S)
    # Outside the strings the query is the template's text, unchanged.
    skeleton = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', "S", rendered)
    assert skeleton == "sum(x{a=S,b=S,c=~S,d!~S}[60s])"
    bound = len(TEMPLATE) + 5 * promql.ESCAPE_FACTOR * promql.MAX_VALUE_CHARS
    assert len(rendered) <= bound


tokens = st.sampled_from([*"{}[]\"'`#\\\n x=~!.:0_", "{{", "}}", *VALUES])


@settings(max_examples=1000)
@given(template=st.lists(tokens, max_size=40).map("".join), value=values)
def test_any_template_either_is_refused_or_renders_within_its_bound(template, value):
    """Parsing arbitrary text fails only with TemplateError; accepted templates render boundedly
    and keep the string literals they have with empty values, whatever the value."""
    try:
        segments = promql.parse(template)
    except promql.TemplateError:
        return
    slots = [s for s in segments if isinstance(s, promql.Slot)]
    filled = {name: value for name in VALUES} | {"window": "5m"}
    rendered = promql.render(template, filled)
    assert len(rendered) <= len(template) + len(slots) * promql.ESCAPE_FACTOR * max(len(value), 2)
    try:
        shape = lex_strings(
            promql.render(template, {name: "" for name in VALUES} | {"window": "5m"})
        )
    except (ValueError, IndexError):
        return  # the template's own literals are not valid PromQL; Prometheus refuses it
    assert len(lex_strings(rendered)) == len(shape)
