"""Sequential canary analysis: promote only on evidence, roll back on evidence, else inconclusive.

Pure and deterministic (numpy only, no Django). `Analyzer(AnalysisConfig(...))`
judges one rollout tick by tick; `BatchAnalyzer` runs the very same arithmetic
over many rollouts at once (the benchmark). Each tick brings one `Window` per arm
(requests, errors, a sample of request latencies in ms) and returns a
`Decision` whose `action` is "continue", "promote", "rollback" or "inconclusive".

Channels. Every test is conditional on the traffic split, never on an absolute
rate (`counts.py`): in a tick k "events" happened over both arms, c of them on
the canary; if the canary is as good as the baseline each event lands on it with
probability pi0 = n_c/(n_b + n_c), whatever the traffic-wide rate, so a burst
that hits both arms cancels out. Three channels:
  * errors: events are failed requests; design ratio `error_ratio` (2: "errors x2");
  * median: events are the samples above the pooled median; `median_ratio` 1.3
    (what +25% at the median does to a log-normal body);
  * tail: events are the samples above the pooled `tail_quantile` (p99.5);
    `tail_ratio` 1.5. A regression confined to the slowest 1-2% of requests
    (+50% there) leaves the share above the pooled p95 or even p99 unchanged (the
    stretched requests were above it anyway) but puts 1.5^a-2x as many canary
    samples above the pooled p99.5 for a Pareto tail of index a >= 1. The
    latency channels only count which arm the slow samples came from: heavy
    tails cannot fool them.
Overdispersion (retry storms, a wobbling baseline) is estimated per channel
from Pearson residuals (`counts.dispersion`) and every log-likelihood ratio is
used as a quasi-likelihood ratio LLR/phi, phi >= 1; a tick in a traffic-wide
error surge has its error llr divided by the surge factor.

The decision rule, per tick after `warmup_ticks`:
  * roll back when the error SPRT crosses its upper bound A = log((1 - beta)/alpha),
    or a latency CUSUM (Page) of the same per-tick llr reaches `cusum_threshold`,
    both divided by the upper `alarm_confidence` bound of phi instead of its point
    estimate (`counts.dispersion_bounds`): with few ticks the point estimate is too
    often low (a baseline whose own latency wobbles from tick to tick looks like a
    canary shift), and a rollback must hold at every dispersion the data allow;
  * a channel is *accepted* when its SPRT log-likelihood ratio (H1: ratio = design
    ratio, against H0: ratio 1, summed from the end of the warm-up) falls to
    B = log(beta/(1 - alpha)); an accepted channel stops (Wald), its CUSUM keeps
    watching;
  * promote when every channel is accepted - and never otherwise;
  * inconclusive when the max duration `max_ticks` is reached undecided; or, once the
    planned `horizon_ticks` have passed, when more than `max_empty_share` of the
    windows carried no evidence, or when the requests still needed cannot arrive
    before `max_ticks` at the current traffic (the analysis extends itself past
    its planned steps only while a decision is in reach).

Why acceptance is valid, and why the same rule serves latency. For one channel,
L_t = prod of the per-tick likelihood ratios H0/H1 is a non-negative martingale
with mean 1 under H1, so by Ville's inequality P_H1(sup_t L_t >= 1/e^B) <= e^B,
i.e. P(the channel is ever accepted | the canary is worse by its design ratio) <=
beta/(1 - alpha), at any stopping time, whatever the number of ticks, looks or
extensions; the conditional binomial family has a monotone likelihood ratio, so
a canary worse than the design ratio is accepted even less often. Dividing the
llr by phi >= 1 or by a surge factor >= 1 only moves it towards 0, further from
B: those corrections can delay a promotion, never cause one. This is Wald's SPRT
used for its accept side, and for latency it is the "two-sided sequential test"
option rather than a confidence sequence on the shift: the rank counts are
already distribution-free, so the exact conditional likelihood is available and
the SPRT is the optimal test between the two simple hypotheses (Wald-Wolfowitz);
a confidence sequence for the latency shift would need a bound on the latency
distribution (sub-Gaussian or bounded), which heavy-tailed latency does not
give. A promotion needs every channel accepted, so a canary with one regressed
channel is promoted with probability at most beta/(1 - alpha) ~ beta. A window
with no traffic in an arm, no metrics or a metrics error contributes exactly
zero to every sum and changes no statistic (the dispersion estimates keep their
values; the usual error level is learnt from windows with evidence only): it never
moves a rollout towards promotion or rollback.

False rollbacks: the error SPRT rejects a healthy canary with probability at
most alpha (Ville again); a CUSUM of log-likelihood ratios reaches h with
probability at most e^-h per excursion, so over T ticks and 2 channels at most
2 T e^-h (a loose union bound: 4.9% for T = 120 and h = 9; observed far below).

Sample sizes. Each tick, per channel, the engine estimates the ticks still
needed to reach the accept bound if the canary is as good as the baseline:
(LLR - B) * phi / D, with D = k KL(pi0 || pi1) / fpc the H0 drift of the llr per
tick computed from a moving average (weight 0.3 for the newest tick) of the
channel's counts - the current traffic and split; times the canary's requests
per tick gives requests, times `tick_seconds` minutes. As evidence accumulates
LLR - B shrinks and so does the estimate. It is an expectation (Wald's
approximation without overshoot), not a promise.

Histogram resolution (`resolution.py`). Latency read from histogram buckets is known
only to its bucket. A `Window` read from buckets carries their bounds, and each tick's
`Evidence` records, per latency channel, the bucket (lo, hi] its pooled quantile fell in
and whether that bucket resolves the channel's design shift (`median_shift` 1.25 and
`tail_shift` 1.5, the latency changes the design ratios stand for): it does when
hi <= shift * lo, so that no request and the same request that much slower share the
bucket. A channel that has counted a tick from an unresolving bucket is never accepted:
where its SPRT would have accepted it is *held*, and once every channel is accepted or
held the rollout ends inconclusive (reason 8), with the bounds or native-histogram schema
that would resolve it. Rollback is unaffected: under H0 the arms' bucketed samples are
still exchangeable, so the false-rollback bounds hold whatever the buckets.

Assumptions: requests within a tick are exchangeable between the arms apart from
the version (the router splits at random); latency samples are a random sample
of each arm's requests.
"""

from canary.sequential.analyzer import Analyzer, evidence, settle_text
from canary.sequential.counts import (
    TickCounts,
    dispersion,
    error_counts,
    h0_drift,
    latency_counts,
    rank_counts,
    share,
    surge,
    tick_llr,
    zero_counts,
)
from canary.sequential.engine import (
    A_CONTINUE,
    A_INCONCLUSIVE,
    A_PROMOTE,
    A_ROLLBACK,
    ACTIONS,
    REASONS,
    BatchAnalyzer,
)
from canary.sequential.model import (
    CHANNELS,
    CONTINUE,
    INCONCLUSIVE,
    PROMOTE,
    ROLLBACK,
    AnalysisConfig,
    ConfigError,
    Decision,
    Evidence,
    Window,
    override_problems,
)

__all__ = [
    "A_CONTINUE",
    "A_INCONCLUSIVE",
    "A_PROMOTE",
    "A_ROLLBACK",
    "ACTIONS",
    "CHANNELS",
    "CONTINUE",
    "INCONCLUSIVE",
    "PROMOTE",
    "REASONS",
    "ROLLBACK",
    "AnalysisConfig",
    "Analyzer",
    "BatchAnalyzer",
    "ConfigError",
    "Decision",
    "Evidence",
    "TickCounts",
    "Window",
    "dispersion",
    "error_counts",
    "evidence",
    "h0_drift",
    "latency_counts",
    "override_problems",
    "rank_counts",
    "settle_text",
    "share",
    "surge",
    "tick_llr",
    "zero_counts",
]
