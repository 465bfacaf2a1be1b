"""Scheduler pages (overview, score explainer) and the extender's Django endpoints."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from kiln.cluster import DeliveryError
from kiln.cluster.backends import get_backend
from kiln.form_errors import field_problems
from kiln.identity.permissions import actor_from_request
from scheduler import cluster_reads, commitment, placement_reads, selectors
from scheduler.extender.handler import FILTER, PRIORITIZE, extender_call
from scheduler.forms import ScoreExplainForm


def _extender(request: HttpRequest, verb: str) -> HttpResponse:
    status, payload = extender_call(verb, request.body, request.headers.get("Authorization"))
    return HttpResponse(payload, status=status, content_type="application/json")


# kube-scheduler calls these without a session or CSRF token; they are protected
# by the optional shared token (KILN_SCHEDULER_EXTENDER_TOKEN) and the network.
@csrf_exempt
@require_POST
def extender_filter(request: HttpRequest) -> HttpResponse:
    """POST /scheduler/filter: ExtenderArgs in, ExtenderFilterResult out."""
    return _extender(request, FILTER)


@csrf_exempt
@require_POST
def extender_prioritize(request: HttpRequest) -> HttpResponse:
    """POST /scheduler/prioritize: ExtenderArgs in, HostPriorityList out."""
    return _extender(request, PRIORITIZE)


def _replay_chart_data(reports) -> dict:
    """Series per scheduler and start of the latest stored replay, for the charts."""
    if not reports:
        return {}
    runs = reports[0].report.get("runs", [])
    series: dict[str, dict[str, list]] = {}
    for run in sorted(runs, key=lambda r: r["spot_fraction"]):
        key = f"{run['scheduler']} ({run['start']})"
        s = series.setdefault(key, {"fraction": [], "latency_on_spot": [], "cost": []})
        s["fraction"].append(run["spot_fraction"])
        s["latency_on_spot"].append(run["latency_on_spot"])
        s["cost"].append(run["cost"])
    return series


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    """Pricing, the cluster's nodes with their pods and score explanations, Workload Commitment
    now and over time, each workload's spread over capacity pools, the nodes frozen against
    disruption and why, the score explainer and stored replays."""
    reports = selectors.replay_report_list()
    cluster, cluster_error = None, ""
    try:
        cluster = cluster_reads.cluster_state(
            viewer=actor_from_request(request), backend=get_backend()
        )
    except (
        DeliveryError
    ) as exc:  # the page still shows pricing and replays while the cluster is away
        cluster_error = str(exc)[:200]
    series = cluster_reads.commitment_series()
    frozen = placement_reads.frozen_nodes(viewer=actor_from_request(request))
    return render(
        request,
        "scheduler/overview.html",
        {
            "instance_types": selectors.instance_type_list(),
            "cluster": cluster,
            "cluster_error": cluster_error,
            "frozen": frozen,
            "frozen_names": {f.node for f in frozen},
            "commitment_series": series,
            "commitment_rows": cluster_reads.commitment_rows(series),
            "commitment_resources": commitment.RESOURCES,
            "form": ScoreExplainForm(),
            "weights": selectors.scoring_weights(),
            "reports": reports,
            "chart_data": _replay_chart_data(reports),
        },
    )


@login_required
@require_POST
def score_explain(request: HttpRequest) -> HttpResponse:
    """htmx fragment: score a sample pod against the current nodes, term by term."""
    form = ScoreExplainForm(request.POST)
    if not form.is_valid():
        return render(
            request,
            "scheduler/_explain.html",
            {"form": form, "rows": None, "refusal": field_problems(form)},
            status=400,
        )
    pod = form.pod()
    visible = cluster_reads.visible_node_names(
        viewer=actor_from_request(request), backend=get_backend()
    )
    explained = selectors.score_explain(pod)
    rows = [r for r in explained.rows if r.name in visible]
    return render(
        request,
        "scheduler/_explain.html",
        {
            "form": form,
            "pod": pod,
            "pod_memory_gib": pod.memory / 2**30,
            # Its share of every node is 0: scoring costs it at each node's whole price.
            "asks_nothing": not (pod.cpu or pod.memory or pod.gpu),
            "explained": explained,
            "rows": rows,
            "cheapest_shown": [n for n in explained.cheapest_nodes if n in visible],
            "hidden_nodes": len(explained.rows) - len(rows),
        },
    )
