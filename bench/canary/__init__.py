"""The canary benchmark: Kiln's sequential engine against a Kayenta-style and a threshold judge.

Pure numpy. Every judge reads the same simulated streams (`streams.py`): per
traffic class, healthy rollouts and as many with a regression (split over errors
x2, +25% at the median, the +50% p90-p99 stretch and +50% on the slowest 2%),
stepped 10% -> 25% -> 50% of traffic, 10 one-minute ticks each, with the
analysis allowed to extend itself to 90 minutes. Constants of every judge are
chosen on the "tune" seed set (`runner.tune`) and the table is reported on the
"report" seed set; the command prints both and says which is which.
"""

from bench.canary.judges import (
    KayentaConfig,
    Outcome,
    ThresholdConfig,
    ThresholdJudge,
    judge_kayenta,
    judge_kiln,
    judge_threshold,
    mann_whitney_p,
)
from bench.canary.runner import run_bench
from bench.canary.streams import BENCH_STEPS, SEED_SETS, bench_classes, weight_at

# The step schedule of the earlier benchmark, kept for the rollouts' own step helper tests.
DEFAULT_STEPS: tuple[tuple[int, int], ...] = ((5, 8), (25, 12), (50, 20))

__all__ = [
    "BENCH_STEPS",
    "DEFAULT_STEPS",
    "SEED_SETS",
    "KayentaConfig",
    "Outcome",
    "ThresholdConfig",
    "ThresholdJudge",
    "bench_classes",
    "judge_kayenta",
    "judge_kiln",
    "judge_threshold",
    "mann_whitney_p",
    "run_bench",
    "weight_at",
]
