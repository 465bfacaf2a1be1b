"""PromQL query templates: a fixed set of named placeholders, parsed and filled without evaluating anything.

Syntax. A template is PromQL in which `{{name}}` (spaces inside the braces allowed)
stands for one of PLACEHOLDERS:

    {{service}}    the canary service's name               inside a quoted string
    {{namespace}}  its namespace                           inside a quoted string
    {{host}}       its host, fully qualified               inside a quoted string
    {{version}}    the arm's version (baseline or canary)  inside a quoted string
    {{window}}     the tick's duration, e.g. 60s           outside strings (a range or offset)

    sum(increase(istio_requests_total{destination_service_name="{{service}}",
        destination_version="{{version}}"}[{{window}}]))

Parsing is a small lexer over PromQL's string literals ("...", '...', `...`)
and comments (# to the end of the line), so each placeholder's context is known
before any value exists. Refused when a template is checked, with the reason and
its offset: an unknown name; attribute access, indexing, calls, conversions,
format specs or filters inside `{{...}}`; a string placeholder outside a quoted
string, `{{window}}` inside one, any placeholder in a raw string or a comment;
an unterminated string; and Python format fields (`{service}`, `{0}`,
`{service.__class__}`, `{window:>9}`), which the old templates used and which
would otherwise reach the metrics server as literal text.

Rendering substitutes values as data, never as code: a string value is escaped
for the PromQL string literal it sits in (backslash, the quote, newline and
other control characters as escapes; after an `=~`/`!~` matcher it is first
quoted as an RE2 literal, so it matches itself only), and `{{window}}` must be a
PromQL duration. Sizes are bounded: a template has at most MAX_TEMPLATE_CHARS
characters and MAX_SLOTS placeholders, a value at most MAX_VALUE_CHARS, and an
escaped character at most ESCAPE_FACTOR characters, so a rendered query is at
most `len(template) + slots * ESCAPE_FACTOR * MAX_VALUE_CHARS` characters.
No Django here.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

STRING = "string"
DURATION = "duration"
PLACEHOLDERS: dict[str, str] = {
    "service": STRING,
    "namespace": STRING,
    "host": STRING,
    "version": STRING,
    "window": DURATION,
}
MAX_TEMPLATE_CHARS = 2000
MAX_SLOTS = 32
MAX_VALUE_CHARS = 253
ESCAPE_FACTOR = 10  # the longest escape of one character: \UXXXXXXXX after RE2 quoting
DURATION_VALUE = re.compile(r"[0-9]{1,9}(ms|s|m|h|d|w|y)")
# A Python str.format replacement field: {name}, {0}, {name.attr}, {name[0]}, {name!r}, {name:spec}.
# `{job!="x"}` and `{job=~"x"}` are PromQL matchers, not fields: `!` must start a conversion.
FORMAT_FIELD = re.compile(r"\{[A-Za-z0-9_]+(?:[.\[][^{}]*|![rsa](?::[^{}]*)?|:[^{}]*)?\}")
PLACEHOLDER_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*")
RE2_META = frozenset("\\.+*?()|[]{}^$")
QUOTES = ('"', "'")


class TemplateError(ValueError):
    """A template Kiln will not run, or a value it will not substitute; `offset` is where, if known."""

    def __init__(self, reason: str, offset: int | None = None) -> None:
        super().__init__(reason if offset is None else f"{reason} (at offset {offset})")
        self.reason = reason
        self.offset = offset


@dataclass(frozen=True)
class Slot:
    """One placeholder: its name and where it sits (a quote character and regex flag, or None outside strings)."""

    name: str
    quote: str | None
    regex: bool = False


Segment = str | Slot


def _names() -> str:
    return ", ".join("{{" + n + "}}" for n in PLACEHOLDERS)


def _placeholder(template: str, start: int) -> tuple[str, int]:
    """The name of the placeholder opening at `start` and the offset just past its `}}`."""
    end = template.find("}}", start + 2)
    if end < 0:
        raise TemplateError("'{{' is never closed by '}}'", start)
    inner = template[start + 2 : end]
    match = PLACEHOLDER_NAME.fullmatch(inner)
    if match and match[1] in PLACEHOLDERS:
        return match[1], end + 2
    if match:
        raise TemplateError(f"unknown placeholder {{{{{match[1]}}}}}; use one of {_names()}", start)
    if '"' in inner or "'" in inner or "=" in inner:
        raise TemplateError(
            f"{{{{{inner[:40]}}}}} is not a placeholder: a PromQL label matcher takes single "
            "braces (a Python format escape?)",
            start,
        )
    for chars, what in (
        ("{", "nested braces"),
        ("\n", "a line break"),
        (".", "attribute access"),
        ("[", "indexing"),
        ("(", "calls"),
        ("!", "conversions"),
        (":", "format specs"),
        ("|", "filters"),
    ):
        if chars in inner:
            raise TemplateError(
                f"placeholders take no {what}: write a bare name, one of {_names()}", start
            )
    raise TemplateError(f"{{{{{inner[:40]}}}}} is not a placeholder; use one of {_names()}", start)


def _format_field(template: str, at: int) -> None:
    match = FORMAT_FIELD.match(template, at)
    if match:
        raise TemplateError(
            f"{match[0][:60]} is a Python format field, not a placeholder: write {{{{name}}}} "
            f"with a name from {_names()}",
            at,
        )


def _regex_context(literal: str) -> bool:
    """True if the text before a string literal ends with a regex matcher (=~ or !~)."""
    return literal.rstrip().endswith(("=~", "!~"))


def parse(template: object) -> tuple[Segment, ...]:
    """Split a template into literal text and Slots; TemplateError explains any refusal."""
    if not isinstance(template, str):
        raise TemplateError("a query template is a string")
    if not template.strip():
        raise TemplateError("the query template is empty")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"a query template has at most {MAX_TEMPLATE_CHARS} characters")
    segments: list[Segment] = []
    text: list[str] = []  # literal characters since the last slot
    quote: str | None = None  # the open string literal's quote, if inside one
    regex = False
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if quote is None:
            if template.startswith("{{", i):
                start = i
                name, i = _placeholder(template, i)
                if PLACEHOLDERS[name] != DURATION:
                    raise TemplateError(
                        f"{{{{{name}}}}} stands for a label value: put it inside a quoted "
                        'string, e.g. label="{{' + name + '}}"',
                        start,
                    )
                segments.extend(["".join(text), Slot(name, None)])
                text = []
                continue
            if template.startswith("}}", i):
                raise TemplateError("'}}' without '{{' (a Python format escape?)", i)
            if ch == "{":
                _format_field(template, i)
            elif ch == "#":
                end = template.find("\n", i)
                end = n if end < 0 else end
                if "{{" in template[i:end]:
                    raise TemplateError("placeholders are not allowed in comments", i)
                text.append(template[i:end])
                i = end
                continue
            elif ch in QUOTES or ch == "`":
                regex = _regex_context("".join(text))
                quote = ch
            text.append(ch)
            i += 1
            continue
        # inside a string literal
        if quote == "`":
            if template.startswith("{{", i):
                raise TemplateError("placeholders are not allowed in raw (`...`) strings", i)
            if ch == "{":
                _format_field(template, i)
            if ch == "`":
                quote = None
            text.append(ch)
            i += 1
            continue
        if ch == "\\":
            if i + 1 >= n:
                break
            text.append(template[i : i + 2])
            i += 2
            continue
        if ch == "\n":
            raise TemplateError("a quoted string cannot span lines", i)
        if template.startswith("{{", i):
            start = i
            name, i = _placeholder(template, i)
            if PLACEHOLDERS[name] != STRING:
                raise TemplateError(
                    f"{{{{{name}}}}} is a duration: put it outside quotes, e.g. [{{{{{name}}}}}]",
                    start,
                )
            segments.extend(["".join(text), Slot(name, quote, regex)])
            text = []
            continue
        if ch == "{":
            _format_field(template, i)
        if ch == quote:
            quote = None
        text.append(ch)
        i += 1
    if quote is not None:
        raise TemplateError(f"unterminated string literal (opened with {quote})")
    segments.append("".join(text))
    slots = sum(isinstance(s, Slot) for s in segments)
    if slots > MAX_SLOTS:
        raise TemplateError(f"a query template has at most {MAX_SLOTS} placeholders")
    return tuple(s for s in segments if s != "")


def validate(template: object) -> None:
    """Raise TemplateError unless `template` is a template Kiln can render."""
    parse(template)


def quote_regex(value: str) -> str:
    """`value` as an RE2 pattern matching exactly itself (Go's regexp.QuoteMeta)."""
    return "".join("\\" + c if c in RE2_META else c for c in value)


def escape_string(value: str, quote: str) -> str:
    """`value` as the body of a PromQL string literal opened with `quote` (Go escapes).

    Backslash and the quote are escaped; newline, tab and carriage return by name;
    other ASCII control characters as \\xHH; other control, format and separator
    characters as \\uXXXX / \\UXXXXXXXX; everything else as itself. A surrogate is
    not a character PromQL can carry: TemplateError.
    """
    out: list[str] = []
    for c in value:
        code = ord(c)
        if c == "\\" or c == quote:
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise TemplateError("a value contains a lone surrogate (not valid Unicode)")
        elif code > 0x7F and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn"):
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(c)
    return "".join(out)


def render(template: str, values: Mapping[str, str]) -> str:
    """The template with every placeholder replaced by its escaped value (see the module docstring)."""
    out: list[str] = []
    for segment in parse(template):
        if isinstance(segment, str):
            out.append(segment)
            continue
        value = values.get(segment.name)
        if not isinstance(value, str):
            raise TemplateError(f"no value for {{{{{segment.name}}}}}")
        if len(value) > MAX_VALUE_CHARS:
            raise TemplateError(
                f"the value of {{{{{segment.name}}}}} is longer than {MAX_VALUE_CHARS} characters"
            )
        if segment.quote is None:
            if not DURATION_VALUE.fullmatch(value):
                raise TemplateError(f"{{{{{segment.name}}}}} must be a PromQL duration such as 60s")
            out.append(value)
            continue
        raw = quote_regex(value) if segment.regex else value
        out.append(escape_string(raw, segment.quote))
    return "".join(out)
