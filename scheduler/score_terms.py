"""A score with its workings: every input and term of `scoring.score_nodes` per node (no Django).

The score explainer on the scheduler page shows these. Nothing here re-derives a formula:
each value comes from the term function `score_nodes` itself calls, weighted and rounded by
the same `scoring.weighted_sum` and `scoring.to_priority`, so the page cannot disagree with
the extender (tests hold `score_terms(...).score` equal to `score_nodes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler import scoring


@dataclass(frozen=True)
class ScoreTerms:
    """Every input and term of `score_nodes` per node, for explaining a score (same arithmetic)."""

    reasons: np.ndarray
    feasible: np.ndarray
    price: np.ndarray  # effective $/h (unpriced nodes at the highest known price)
    share: np.ndarray  # the pod's dominant share of the node
    pod_cost: np.ndarray  # $/h the pod costs on the node
    cheapest: float | None  # the lowest pod cost over feasible nodes
    cost: np.ndarray
    packing: scoring.PackingParts
    likelihood: np.ndarray
    restart: float
    risk: np.ndarray
    raw: np.ndarray
    score: np.ndarray


def score_terms(
    nodes: scoring.NodeArrays,
    pod: scoring.PodRequest,
    weights: scoring.Weights,
    reasons: np.ndarray | None = None,
) -> ScoreTerms:
    """`score_nodes` with its workings: the same term functions, the same weighting and rounding."""
    if reasons is None:
        reasons = scoring.filter_nodes(nodes, pod)
    feasible = reasons == scoring.FIT
    price = scoring.effective_prices(nodes.price)
    share = scoring.dominant_share(nodes, pod)
    pod_cost = scoring.pod_hourly_cost(price, share)
    cost = scoring.cost_term(price, share, feasible)
    packing = scoring.packing_parts(nodes, pod)
    risk = scoring.risk_term(nodes, pod)
    raw = scoring.weighted_sum(weights, cost, packing.value, risk)
    score = scoring.to_priority(raw, feasible)
    return ScoreTerms(
        reasons=reasons,
        feasible=feasible,
        price=price,
        share=share,
        pod_cost=pod_cost,
        cheapest=scoring.cheapest_pod_cost(pod_cost, feasible),
        cost=cost,
        packing=packing,
        likelihood=scoring.interruption_likelihood(nodes),
        restart=scoring.restart_cost(pod),
        risk=risk,
        raw=raw,
        score=score,
    )
