"""kube-scheduler's default filters, as the simulated kube-scheduler runs them before calling Kiln's extender.

No Django. Plugins, in kube-scheduler's order, each with its reasons as
kube-scheduler words them (`pkg/scheduler/framework/plugins/`):

- NodeUnschedulable: `node(s) were unschedulable` (cordoned: `spec.unschedulable`);
- NodeAffinity: `nodeSelector` and required node affinity
  (`requiredDuringSchedulingIgnoredDuringExecution`, operators In, NotIn, Exists,
  DoesNotExist, Gt, Lt; terms ORed, expressions ANDed):
  `node(s) didn't match Pod's node affinity/selector`;
- TaintToleration: every NoSchedule/NoExecute taint needs a toleration:
  `node(s) had untolerated taint {key: value}`;
- NodeResourcesFit: `requested + pod <= allocatable` per resource:
  `Insufficient cpu`, `Insufficient memory`, `Insufficient nvidia.com/gpu`.

A node is counted under the first plugin that rejects it (resources list every
resource short). `unschedulable_message` writes kube-scheduler's
`0/N nodes are available: ...` line from the counts.

The placement-independent filters (the first three) depend only on the pod's
template and the node's labels and taints, so `NodeTable.static_verdict` keeps
their answer per template: pods of one workload are judged once.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
RESOURCE_NAMES = ("cpu", "memory", "nvidia.com/gpu")
_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether one of the tolerations matches the taint (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        operator = t.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True  # an empty key with Exists tolerates everything
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(
    tolerations: list[dict[str, Any]], taints: list[dict[str, Any]]
) -> dict | None:
    """The first NoSchedule/NoExecute taint no toleration matches, or None."""
    for taint in taints:
        if taint.get("effect") in _EFFECTS and not tolerates(tolerations, taint):
            return taint
    return None


def _expression_holds(labels: dict[str, str], expr: dict[str, Any]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_affinity(labels: dict[str, str], spec: dict[str, Any]) -> bool:
    """nodeSelector (every pair) and required node affinity (any term, all its expressions)."""
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(
        all(_expression_holds(labels, e) for e in term.get("matchExpressions") or [])
        and all(
            _expression_holds({"metadata.name": labels.get("kubernetes.io/hostname", "")}, e)
            for e in term.get("matchFields") or []
        )
        for term in terms
    )


def taint_reason(taint: dict[str, Any]) -> str:
    """kube-scheduler's words for an untolerated taint."""
    return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"


def template_key(spec: dict[str, Any]) -> str:
    """What the placement-independent filters read of a pod: its selector, affinity, tolerations."""
    return json.dumps(
        [spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")], sort_keys=True
    )


@dataclass(frozen=True)
class StaticVerdict:
    """The placement-independent filters' answer for one pod template over a pass's nodes.

    `mask[i]`: node i passes them; `reasons[i]`: why not ("" where it passes);
    `counts`: how many nodes fail with each reason (what `feasible` reports for them).
    """

    mask: np.ndarray
    reasons: list[str]
    counts: Counter


@dataclass
class NodeTable:
    """The nodes one scheduling pass sees: labels, taints, cordons, and (N, 3) allocatable/requested.

    `requested` is the scheduler's own cache: `assume` adds a pod the moment it is
    bound, as kube-scheduler assumes a pod before its binding is written.
    """

    names: list[str]
    labels: list[dict[str, str]]
    taints: list[list[dict[str, Any]]]
    unschedulable: np.ndarray
    allocatable: np.ndarray
    requested: np.ndarray
    _static: dict[str, StaticVerdict] = field(default_factory=dict, repr=False)

    def static_verdict(self, spec: dict[str, Any]) -> StaticVerdict:
        """The placement-independent filters' verdict for a pod spec, judged once per template."""
        key = template_key(spec)
        cached = self._static.get(key)
        if cached is not None:
            return cached
        tolerations = spec.get("tolerations") or []
        reasons: list[str] = []
        for i, labels in enumerate(self.labels):
            if self.unschedulable[i]:
                reasons.append(REASON_UNSCHEDULABLE)
            elif not matches_affinity(labels, spec):
                reasons.append(REASON_AFFINITY)
            else:
                taint = untolerated_taint(tolerations, self.taints[i])
                reasons.append(taint_reason(taint) if taint is not None else "")
        mask = np.array([not r for r in reasons], dtype=bool)
        verdict = StaticVerdict(mask, reasons, Counter(r for r in reasons if r))
        self._static[key] = verdict
        return verdict

    def fits(self, request: np.ndarray) -> np.ndarray:
        """(N, 3) booleans: whether each resource still fits on each node."""
        return self.requested + request <= self.allocatable + 1e-9

    def feasible(self, spec: dict[str, Any], request: np.ndarray) -> tuple[np.ndarray, Counter]:
        """Nodes passing every default filter, and the count of each reason the others failed with.

        A node failing a placement-independent filter counts under that reason; a node
        passing them counts once under each resource it is short of.
        """
        verdict = self.static_verdict(spec)
        fits = self.fits(request)
        ok = verdict.mask & fits.all(axis=1)
        counts = Counter(verdict.counts)
        short = np.count_nonzero(~fits & verdict.mask[:, None], axis=0)
        for r, name in enumerate(RESOURCE_NAMES):
            if short[r]:
                counts[f"Insufficient {name}"] += int(short[r])
        return ok, counts

    def assume(self, index: int, request: np.ndarray) -> None:
        """Count a pod bound to node `index` in the cache."""
        self.requested[index] += request


def unschedulable_message(total: int, counts: Counter) -> str:
    """`0/N nodes are available: a reason, b reason.` (reasons sorted, as kube-scheduler sorts them)."""
    if not total:
        return "no nodes available to schedule pods"
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
    return (
        f"0/{total} nodes are available: {parts}." if parts else f"0/{total} nodes are available."
    )
