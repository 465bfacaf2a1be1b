"""Auditor pages: the chain explorer, event detail with neighbours, and the chain status panel."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from audit import selectors
from audit.api import filters_from
from kiln.errors import InvalidInput, InvalidParameter
from kiln.identity.permissions import actor_from_request, can_view_audit
from kiln.params import ParamError

PAGE_SIZE = 50


def _require_auditor(request: HttpRequest) -> None:
    if not can_view_audit(actor_from_request(request)):
        raise PermissionDenied("Only auditors can read the audit chain.")


@login_required
def explorer(request: HttpRequest) -> HttpResponse:
    """The chain explorer: filters, a page of entries, the status panel and the export buttons."""
    _require_auditor(request)
    error = ""
    try:
        filters = filters_from(request.GET)
        before = selectors.decode_cursor(request.GET.get("cursor"))
    except ParamError as exc:
        error = InvalidParameter.from_param(exc).message
        filters, before = selectors.EventFilter(), None
    except InvalidInput as exc:
        error, filters, before = exc.message, selectors.EventFilter(), None
    rows, next_seq = selectors.event_page(filters, before=before, limit=PAGE_SIZE)
    keep = (
        {}
        if error
        else {
            k: v
            for k, v in request.GET.items()
            if k in ("from", "to", "actor", "action", "target") and v
        }
    )
    next_url = (
        f"{reverse('audit:explorer')}?{urlencode({**keep, 'cursor': selectors.encode_cursor(next_seq)})}"
        if next_seq
        else None
    )
    export_params = {k: v for k, v in keep.items() if k in ("from", "to")}
    export_query = urlencode(export_params)
    return render(
        request,
        "audit/explorer.html",
        {
            "rows": rows,
            "filters": keep,
            "error": error,
            "next_url": next_url,
            "first_url": reverse("audit:explorer") + (f"?{urlencode(keep)}" if keep else ""),
            "paged": before is not None,
            "export_jsonl": f"{reverse('audit-api:export')}?{export_query}",
            "export_csv": f"{reverse('audit-api:export')}?{urlencode({**export_params, 'format': 'csv'})}",
            "status": selectors.chain_status(),
        },
        status=400 if error else 200,  # the page still renders, with the reason shown
    )


@login_required
def event_detail(request: HttpRequest, seq: int) -> HttpResponse:
    """One entry with its hash input fields, its hash and its neighbours."""
    _require_auditor(request)
    event, previous, following = selectors.event_detail(seq)
    if event is None:
        raise Http404("no such entry")
    return render(
        request,
        "audit/event_detail.html",
        {
            "event": event,
            "previous": previous,
            "following": following,
            "data_pretty": json.dumps(json.loads(event.data), indent=2, ensure_ascii=False),
            "links": previous is None
            and seq == 1
            or (previous is not None and previous.hash == event.prev_hash),
        },
    )


@login_required
def status_panel(request: HttpRequest) -> HttpResponse:
    """The chain status panel alone (the explorer refreshes it with htmx)."""
    _require_auditor(request)
    return render(request, "audit/_status.html", {"status": selectors.chain_status()})
