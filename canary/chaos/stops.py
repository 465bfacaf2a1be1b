"""Stop conditions judged on readings: breached, holding, or not measurable (pure: no Django).

A condition names a signal of the experiment's target and a threshold:

| condition | signal | breached when |
|---|---|---|
| `error-rate-above` | `error-rate`: failed / all requests in the window, in [0, 1] | value > threshold |
| `latency-p99-above-ms` | `latency-p99-ms`: the window's 99th percentile, ms | value > threshold |
| `canary-rolled-back` | `canary-rolled-back`: 1 once a rollout of the target rolled back | value >= 1 |

Every condition is read on every renewal (canary/chaos/stop_signals.py reads them, outside
any transaction). A breach wins over everything: the experiment aborts naming the condition
and the value. A condition that could not be read (the metrics source down, slow past its
budget, silent) is *unmeasurable*: the experiment aborts rather than run blind, unless it
was created with `continue_without_metrics`, when the gap is reported and it runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ERROR_RATE, P99, ROLLED_BACK = "error-rate-above", "latency-p99-above-ms", "canary-rolled-back"
KINDS = (ERROR_RATE, P99, ROLLED_BACK)
SIGNAL_OF = {ERROR_RATE: "error-rate", P99: "latency-p99-ms", ROLLED_BACK: "canary-rolled-back"}
HOLD, BREACHED, UNMEASURABLE = "hold", "breached", "unmeasurable"


@dataclass(frozen=True)
class Reading:
    """One signal of the target as read now: its value, or why there is none (`error`)."""

    value: float | None
    source: str
    error: str = ""
    detail: str = ""

    @property
    def measured(self) -> bool:
        return not self.error and self.value is not None


@dataclass(frozen=True)
class Verdict:
    """What the conditions say now; `condition`, `value` and `reason` name the deciding one."""

    outcome: str
    condition: Mapping[str, Any] | None = None
    value: float | None = None
    reason: str = ""
    source: str = ""
    gaps: list[str] = field(default_factory=list)  # unmeasurable, tolerated by the flag

    @property
    def aborts(self) -> bool:
        return self.outcome in (BREACHED, UNMEASURABLE)

    def evidence(self) -> dict[str, Any]:
        """The verdict as the abort's audit event and the experiment page carry it."""
        return {
            "stop_condition": {
                "outcome": self.outcome,
                "kind": (self.condition or {}).get("kind"),
                "threshold": (self.condition or {}).get("threshold"),
                "value": self.value,
                "source": self.source,
                "reason": self.reason,
            }
        }


def describe(condition: Mapping[str, Any]) -> str:
    """`error-rate-above 0.2`, `canary-rolled-back`."""
    threshold = condition.get("threshold")
    return condition["kind"] if threshold is None else f"{condition['kind']} {threshold:g}"


def in_words(condition: Mapping[str, Any]) -> str:
    """A condition as a page says it: `error rate above 20%`, `p99 latency above 500 ms`,
    `a rollout of the target rolled back` (`describe` is the API's and the audit's form)."""
    kind, threshold = condition.get("kind"), condition.get("threshold")
    if kind == ROLLED_BACK:
        return "a rollout of the target rolled back"
    if threshold is None:
        return str(kind)
    if kind == ERROR_RATE:
        return f"error rate above {float(threshold) * 100:g}%"
    if kind == P99:
        return f"p99 latency above {float(threshold):g} ms"
    return describe(condition)


def _shown(kind: str, value: float) -> str:
    if kind == ERROR_RATE:
        return f"error rate {value:.4f}"
    if kind == P99:
        return f"p99 latency {value:.1f} ms"
    return "a rollout of the target rolled back"


def breached(condition: Mapping[str, Any], value: float) -> bool:
    """True when a measured value trips the condition (strictly above its threshold)."""
    if condition["kind"] == ROLLED_BACK:
        return value >= 1
    return value > float(condition["threshold"])


def evaluate(
    conditions: Sequence[Mapping[str, Any]],
    read: Callable[[str], Reading],
    *,
    continue_without_metrics: bool = False,
) -> Verdict:
    """Read each condition's signal once and judge: the first breach, else the first condition
    that could not be read (unless tolerated), else hold."""
    readings: dict[str, Reading] = {}
    unmeasured: list[tuple[Mapping[str, Any], Reading]] = []
    for cond in conditions:
        signal = SIGNAL_OF[cond["kind"]]
        if signal not in readings:
            readings[signal] = read(signal)
        reading = readings[signal]
        if not reading.measured:
            unmeasured.append((cond, reading))
            continue
        value = float(reading.value)  # type: ignore[arg-type]
        if breached(cond, value):
            return Verdict(
                BREACHED,
                condition=cond,
                value=value,
                source=reading.source,
                reason=f"{describe(cond)}: {_shown(cond['kind'], value)} "
                f"({reading.source}{', ' + reading.detail if reading.detail else ''})",
            )
    gaps = [f"{describe(c)}: {r.error or 'no reading'} ({r.source})" for c, r in unmeasured]
    if unmeasured and not continue_without_metrics:
        cond, reading = unmeasured[0]
        return Verdict(
            UNMEASURABLE,
            condition=cond,
            source=reading.source,
            reason=f"{describe(cond)} cannot be evaluated: {reading.error or 'no reading'} "
            f"({reading.source}); the experiment does not run blind",
            gaps=gaps,
        )
    return Verdict(HOLD, gaps=gaps)
