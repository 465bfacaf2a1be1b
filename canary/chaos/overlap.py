"""When two chaos experiments' targets overlap: label selectors that can match one pod, hosts, time.

Pure: no Django. A label selector is Kubernetes' (`metav1.LabelSelector`): `matchLabels`
(key = value) and `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`), every
requirement ANDed. Two selectors *intersect* when some set of labels matches both, i.e.
when some pod could be the target of both experiments. Soundness matters more than
precision here, and the rule is exact anyway: requirements on different keys never
conflict (a pod may carry any value of a key no requirement names), so the selectors
intersect unless one key is required to have disjoint values:

- required absent (`DoesNotExist`) by one and present (`Exists`, `In`) by the other, or
- the values allowed for it (every `In` and `matchLabels` set, intersected) are empty once
  every `NotIn` value is taken out.

A key only ever excluded (`NotIn`, `DoesNotExist`) is satisfied by a value nobody names or
by its absence, so it never separates two selectors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)


@dataclass(frozen=True)
class Requirement:
    """One requirement on one label key (`values` only for In and NotIn)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()


@dataclass
class _KeyRule:
    """Everything the requirements of some selectors say about one key."""

    allowed: frozenset[str] | None = None  # None: any value
    excluded: set[str] = field(default_factory=set)
    present: bool = False
    absent: bool = False


def requirements(selector: Mapping[str, Any]) -> list[Requirement]:
    """The requirements of a selector: a `{matchLabels, matchExpressions}` object, or a plain
    `matchLabels` mapping (what an experiment stores)."""
    if "matchLabels" in selector or "matchExpressions" in selector:
        labels = selector.get("matchLabels") or {}
        expressions = selector.get("matchExpressions") or []
    else:
        labels, expressions = selector, []
    reqs = [Requirement(str(k), IN, frozenset({str(v)})) for k, v in labels.items()]
    for expr in expressions:
        op = expr.get("operator")
        if op not in OPERATORS:
            raise ValueError(f"unknown selector operator {op!r}")
        reqs.append(
            Requirement(str(expr["key"]), op, frozenset(map(str, expr.get("values") or [])))
        )
    return reqs


def _rules(reqs: Iterable[Requirement]) -> dict[str, _KeyRule]:
    rules: dict[str, _KeyRule] = {}
    for req in reqs:
        rule = rules.setdefault(req.key, _KeyRule())
        if req.operator == IN:
            rule.present = True
            rule.allowed = req.values if rule.allowed is None else rule.allowed & req.values
        elif req.operator == NOT_IN:
            rule.excluded |= req.values
        elif req.operator == EXISTS:
            rule.present = True
        else:
            rule.absent = True
    return rules


def conflicting_key(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The first key (sorted) that no pod can satisfy for both selectors, or None if they intersect."""
    for key, rule in sorted(_rules([*requirements(a), *requirements(b)]).items()):
        if rule.absent and rule.present:
            return key
        if rule.allowed is not None and not (rule.allowed - rule.excluded):
            return key
    return None


def selectors_intersect(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when some set of labels matches both selectors (some pod could be both targets)."""
    return conflicting_key(a, b) is None


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """True when a pod with `labels` is selected (Kubernetes' label selector semantics)."""
    for req in requirements(selector):
        value = labels.get(req.key)
        if req.operator == IN and value not in req.values:
            return False
        if req.operator == NOT_IN and value is not None and value in req.values:
            return False
        if req.operator == EXISTS and value is None:
            return False
        if req.operator == DOES_NOT_EXIST and value is not None:
            return False
    return True


def windows_overlap(
    a: tuple[datetime, datetime | None], b: tuple[datetime, datetime | None]
) -> bool:
    """True when two half-open time windows [start, end) share an instant; None ends never."""
    (a_start, a_end), (b_start, b_end) = a, b
    return (a_end is None or b_start < a_end) and (b_end is None or a_start < b_end)


@dataclass(frozen=True)
class Target:
    """What an experiment may touch, and when: its namespace, selector, service host, window."""

    namespace: str
    selector: Mapping[str, Any]
    service: str
    start: datetime
    end: datetime | None


def overlap_reason(a: Target, b: Target) -> str | None:
    """Why two targets overlap (same namespace with intersecting selectors, or the same service
    host, at overlapping times), or None when they do not."""
    if not windows_overlap((a.start, a.end), (b.start, b.end)):
        return None
    if a.service and a.service == b.service:
        return f"both fault the service {a.service}"
    if a.namespace == b.namespace and selectors_intersect(a.selector, b.selector):
        return f"their selectors can match the same pods in namespace {a.namespace}"
    return None
