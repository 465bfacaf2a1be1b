"""Rollout reads: what a viewer may see, and the series the dashboard draws."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet

from canary.models import Rollout, Service
from kiln.errors import NotFound
from kiln.identity import visibility
from kiln.identity.permissions import Actor, can_manage_rollout


def _one(rows: QuerySet, key: Any, what: str) -> Any:
    """The row of `rows` with UUID `key`; a malformed key is the same 404 as a missing row."""
    try:
        pk = uuid.UUID(str(key))
    except ValueError as exc:
        raise NotFound(f"no such {what}") from exc
    row = rows.filter(pk=pk).first()
    if row is None:
        raise NotFound(f"no such {what}")
    return row


def rollout_list(*, viewer: Actor, status: str | None = None) -> QuerySet[Rollout]:
    """Rollouts the viewer may see, newest first (ties by id: pages do not overlap)."""
    qs = visibility.restrict(
        Rollout.objects.select_related("service__team"),
        viewer,
        visibility.ROLLOUTS,
        team_field="service__team__slug",
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-created_at", "-pk")


def rollout_get(*, viewer: Actor, rollout_id: Any) -> Rollout:
    """One rollout; a hidden one is the same 404 as a missing one."""
    return _one(rollout_list(viewer=viewer), rollout_id, "rollout")


def service_list(*, viewer: Actor) -> QuerySet[Service]:
    """Services the viewer may see (those of the rollouts it sees)."""
    return visibility.restrict(
        Service.objects.select_related("team"), viewer, visibility.ROLLOUTS, team_field="team__slug"
    )


def startable_services(*, viewer: Actor) -> QuerySet[Service]:
    """Services the viewer may start a rollout of: those it sees that `can_manage_rollout` lets
    it manage (an auditor or an approver sees services but starts none)."""
    visible = service_list(viewer=viewer)
    teams = {service.team.slug for service in visible}
    return visible.filter(team__slug__in=[t for t in teams if can_manage_rollout(viewer, t)])


def service_get(*, viewer: Actor, service_id: Any) -> Service:
    """One service the viewer may see, else 404."""
    return _one(service_list(viewer=viewer), service_id, "service")


# A rollout's plan and state as stored: the API, the dashboard and its audit events show them.
ROLLOUT_FIELDS = (
    "baseline_version",
    "canary_version",
    "steps",
    "ticks_per_step",
    "tick_seconds",
    "status",
    "weight",
)


def rollout_fields(rollout: Rollout) -> dict[str, Any]:
    """The rollout's `ROLLOUT_FIELDS`, by name."""
    return {name: getattr(rollout, name) for name in ROLLOUT_FIELDS}


def rollout_summary(rollout: Rollout) -> dict[str, Any]:
    """The rollout's state as the API and the dashboard show it."""
    return {
        "id": str(rollout.pk),
        "service": {
            "id": str(rollout.service_id),
            "name": rollout.service.name,
            "namespace": rollout.service.namespace,
            "team": rollout.service.team.slug,
        },
        **rollout_fields(rollout),
        "ticks_done": rollout.ticks_done,
        "reason": rollout.reason,
        "finished": rollout.is_finished,
        # The latest analysis: bounds, CUSUM, per-channel sample sizes, what would settle it.
        "analysis": rollout.analysis or {},
        "requests_needed": (rollout.analysis or {}).get("requests_needed"),
        "minutes_needed": (rollout.analysis or {}).get("minutes_needed"),
        "created_at": rollout.created_at.isoformat() if rollout.created_at else None,
        "finished_at": rollout.finished_at.isoformat() if rollout.finished_at else None,
    }


def _no_evidence(ev: dict[str, Any]) -> bool:
    """A tick without metrics or without traffic in an arm (see `Evidence.empty`)."""
    counts = ev.get("errors") or [0, 0, 0, 0]
    return bool(ev.get("missing")) or counts[0] <= 0 or counts[1] <= 0


def _tick_point(tick) -> dict[str, Any]:
    d = tick.decision
    return {
        "tick": tick.number,
        "weight": tick.weight,
        "action": tick.action,
        "canary_error_rate": d["canary_error_rate"],
        "baseline_error_rate": d["baseline_error_rate"],
        "llr": d["llr"],
        "llr_lower": d["llr_lower"],
        "llr_upper": d["llr_upper"],
        "cusum": d["cusum"],
        "cusum_median": d.get("cusum_median"),
        "cusum_tail": d.get("cusum_tail"),
        "cusum_threshold": d["cusum_threshold"],
        "requests_needed": d.get("requests_needed"),
        "minutes_needed": d.get("minutes_needed"),
        "settle": d.get("settle", ""),
        "empty": _no_evidence(tick.evidence or {}),
        "canary_p50_ms": d["canary_p50_ms"],
        "baseline_p50_ms": d["baseline_p50_ms"],
        "canary_p99_ms": d["canary_p99_ms"],
        "baseline_p99_ms": d["baseline_p99_ms"],
        "reason": d["reason"],
    }


CHANNEL_LABELS = {
    "errors": "Error rate",
    "median": "Median latency",
    "tail": "Tail latency (p99.5)",
}


def channel_resolution_cell(c: dict[str, Any], res: dict[str, Any] | None) -> str:
    """The resolution cell of a channel row: exact (counts, raw samples) or the bucket and whether it resolves."""
    if not res:
        return "exact" if c.get("resolved", True) else "buckets too wide"
    lo, hi = res["bucket_ms"]
    bucket = f"{lo:g}–{hi:g} ms" if hi is not None else f"> {lo:g} ms"
    if c.get("resolved", True):
        return f"{bucket} bucket: resolves ×{res['shift']:g}"
    return f"{bucket} bucket: can hide ×{res['shift']:g}"


def rollout_analysis_view(rollout: Rollout) -> dict[str, Any]:
    """The latest analysis in the shape the dashboard explains it: one row per channel."""
    a = rollout.analysis or {}
    rows = []
    for ch, c in (a.get("channels") or {}).items():
        rows.append(
            {
                "channel": ch,
                "label": CHANNEL_LABELS.get(ch, ch),
                "llr": c.get("llr"),
                "accepted": c.get("accepted"),
                "cusum": c.get("cusum"),
                "ratio": c.get("ratio"),
                "requests_needed": c.get("requests_needed"),
                "minutes_needed": c.get("minutes_needed"),
                "resolved": c.get("resolved", True),
                "held": c.get("held", False),
                "resolution": channel_resolution_cell(c, c.get("resolution")),
            }
        )
    return {
        "present": bool(a),
        "tick": a.get("tick"),
        "llr_lower": a.get("llr_lower"),
        "llr_upper": a.get("llr_upper"),
        "cusum_threshold": a.get("cusum_threshold"),
        "channels": rows,
        "labels": CHANNEL_LABELS,
        "requests_needed": a.get("requests_needed"),
        "minutes_needed": a.get("minutes_needed"),
        "empty_ticks": a.get("empty_ticks"),
        "max_ticks": a.get("max_ticks"),
        "settle": a.get("settle") or "",
        # What would resolve each latency channel whose histogram buckets cannot.
        "unresolved": [
            c["resolution"].get("text", "")
            for c in (a.get("channels") or {}).values()
            if c.get("resolution") and not c.get("resolved", True)
        ],
    }


# A decision's fields as stored, besides its id and time (`DecisionOutput` types them).
_DECISION_FIELDS = ("tick", "kind", "actor", "from_weight", "to_weight", "reason")


def _decisions(rollout: Rollout) -> list[dict[str, Any]]:
    """Every decision on the rollout, oldest first, as the dashboard and the API show it."""
    return [
        {"id": d.pk, **{f: getattr(d, f) for f in _DECISION_FIELDS}, "at": d.created_at.isoformat()}
        for d in rollout.decisions.order_by("created_at", "id")
    ]


def rollout_ticks(rollout: Rollout) -> list[dict[str, Any]]:
    """Every analysed tick's statistics, in tick order (what the charts and their tables show)."""
    return [_tick_point(t) for t in rollout.ticks.order_by("number")]


def rollout_series(rollout: Rollout) -> dict[str, Any]:
    """Everything the dashboard draws: state, every tick's statistics, every decision."""
    return {
        "rollout": rollout_summary(rollout),
        "ticks": rollout_ticks(rollout),
        "decisions": _decisions(rollout),
    }


def rollout_stream_update(rollout_id: Any) -> dict[str, Any]:
    """The incremental websocket message: state, latest tick, all decisions (few)."""
    rollout = Rollout.objects.select_related("service__team").get(pk=rollout_id)
    return stream_update_of(rollout, rollout.ticks.order_by("-number").first())


def stream_update_of(rollout: Rollout, last_tick: Any) -> dict[str, Any]:
    """The websocket message of a rollout already in hand (service and team loaded) and its latest tick."""
    return {
        "type": "update",
        "rollout": rollout_summary(rollout),
        "tick": _tick_point(last_tick) if last_tick else None,
        "decisions": _decisions(rollout),
    }
