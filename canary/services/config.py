"""What a rollout's analysis runs with: its analysed steps and its AnalysisConfig."""

from __future__ import annotations

from typing import Any

from canary.models import Rollout
from canary.sequential import AnalysisConfig

MAX_DURATION_FACTOR = 3  # by default the analysis may extend itself to 3x its planned steps


def analysis_steps(rollout: Rollout) -> tuple[tuple[int, int], ...]:
    """The analysed steps ((weight, ticks), ...): every step below 100%."""
    return tuple((int(w), rollout.ticks_per_step) for w in rollout.steps if int(w) < 100)


def analysis_config(rollout: Rollout) -> AnalysisConfig:
    """The rollout's AnalysisConfig: defaults, horizon from its steps, then its overrides.

    The max duration is `MAX_DURATION_FACTOR` times the planned steps unless the rollout
    sets `max_ticks`, plus the ticks a person added by extending the analysis.
    """
    horizon = rollout.ticks_per_step * len(analysis_steps(rollout))
    base: dict[str, Any] = {
        "horizon_ticks": horizon,
        "warmup_ticks": min(5, max(1, horizon // 5)),
        "max_ticks": MAX_DURATION_FACTOR * horizon,
        "tick_seconds": float(rollout.tick_seconds),
    }
    base.update(rollout.config or {})
    if isinstance(base.get("max_ticks"), int):
        base["max_ticks"] += rollout.extra_ticks
    return AnalysisConfig(**base)
