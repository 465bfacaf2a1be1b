"""Auditor pages: the chain explorer, event detail with neighbours, and the chain status panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from audit import selectors, services
from audit.api import filters_from
from audit.chain.verification import load_public_key
from audit.explorer.grouping import group_rows
from audit.services import public_key_path
from audit.tree import tlog_verify
from audit.witness import selectors as witness_selectors
from kiln.errors import Forbidden, InvalidInput, InvalidParameter, NotFound
from kiln.identity.permissions import actor_from_request, can_view_audit
from kiln.params import ParamError

PAGE_SIZE = 50
# The explorer's "Who" filter: (value, words).
WHO_OPTIONS = (("", "people and system"), ("people", "people"), ("system", "system components"))


def _require_auditor(request: HttpRequest) -> None:
    if not can_view_audit(actor_from_request(request)):
        raise PermissionDenied("Only auditors can read the audit chain.")


# The explorer's filters: their query names and what the form calls them.
FILTER_FIELDS = {
    "from": "From",
    "since": "From",
    "to": "To",
    "until": "To",
    "who": "Who",
    "actor": "Actor",
    "action": "Action",
    "target": "Target",
}


def filter_error_words(message: str) -> str:
    """An API's refusal of a filter in the form's words: "Query parameter `target` is longer
    than 300 characters." reads "Target is longer than 300 characters.", and nothing is listed."""
    words = re.sub(
        r"(?:Query parameter )?`(\w+)`", lambda m: FILTER_FIELDS.get(m[1], m[1]), message
    )
    return f"{words.rstrip('.')}. Nothing is listed until the filter is corrected."


@login_required
def explorer(request: HttpRequest) -> HttpResponse:
    """The chain explorer: filters, a page of entries, the status panel and the export buttons."""
    _require_auditor(request)
    error = ""
    rows, next_seq, before = [], None, None
    try:
        filters = filters_from(request.GET)
        before = selectors.decode_cursor(request.GET.get("cursor"))
    except ParamError as exc:
        error = filter_error_words(InvalidParameter.from_param(exc).message)
    except InvalidInput as exc:
        error = filter_error_words(exc.message)
    else:
        rows, next_seq = selectors.event_page(filters, before=before, limit=PAGE_SIZE)
    # What the person typed stays in the form, a bad value too, for them to correct; with a bad
    # one nothing is listed (not the whole chain under a filter that was not applied).
    keep = {k: v for k, v in request.GET.items() if k in FILTER_FIELDS and v}
    next_url = (
        f"{reverse('audit:explorer')}?{urlencode({**keep, 'cursor': selectors.encode_cursor(next_seq)})}"
        if next_seq
        else None
    )
    export_params = {} if error else {k: v for k, v in keep.items() if k in ("from", "to")}
    export_query = urlencode(export_params)
    shown = witness_selectors.tree_head_key()  # first: a card newer than its key is swapped again
    tlog = witness_selectors.tree_head()
    return render(
        request,
        "audit/explorer.html",
        {
            "rows": rows,
            "items": group_rows(rows),
            "who_choices": WHO_OPTIONS,
            "filters": keep,
            "error": error,
            "next_url": next_url,
            "first_url": reverse("audit:explorer") + (f"?{urlencode(keep)}" if keep else ""),
            "paged": before is not None,
            "export_jsonl": f"{reverse('audit-api:export')}?{export_query}",
            "export_csv": f"{reverse('audit-api:export')}?{urlencode({**export_params, 'format': 'csv'})}",
            **_status_context(request),
            "tlog": tlog,
            "tlog_shown": shown,
        },
        status=400 if error else 200,  # the page still renders, with the reason shown
    )


@login_required
def event_detail(request: HttpRequest, seq: int) -> HttpResponse:
    """One entry with its hash input fields, its hash and its neighbours; `?prove=1` adds its
    inclusion proof, verified here and in the browser, with how to verify it offline."""
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
            "proof": _proof_context(seq) if request.GET.get("prove") else None,
        },
    )


def _proof_context(seq: int) -> dict:
    """The entry's proof bundle and what the standalone verifier says of it (with every
    configured witness key, no quorum), or why there is none yet."""
    try:
        bundle = selectors.event_proof_bundle(seq=seq)
    except NotFound as exc:
        return {"missing": exc.message}
    witnesses = witness_selectors.witness_status()
    try:
        load_public_key()  # dev: creates the key pair on first use
        head = tlog_verify.verify_bundle(
            bundle, public_key_path().read_text(encoding="utf-8"),
            [w["verifier_key"] for w in witnesses],
        )  # fmt: skip
        verdict, cosigners = "", list(head.witnesses)
    except tlog_verify.VerificationError as exc:
        verdict, cosigners = str(exc), []
    return {"bundle": bundle, "failure": verdict, "cosigners": cosigners,
            "witness_count": len(witnesses)}  # fmt: skip


@login_required
def verifier_script(request: HttpRequest) -> HttpResponse:
    """The standalone verifier (audit/tree/tlog_verify.py) as a download: one file, stdlib + cryptography."""
    _require_auditor(request)
    response = HttpResponse(
        Path(tlog_verify.__file__).read_text(encoding="utf-8"), content_type="text/x-python"
    )
    response["Content-Disposition"] = 'attachment; filename="tlog_verify.py"'
    return response


@login_required
def status_panel(request: HttpRequest) -> HttpResponse:
    """The chain status panel, refreshed by the explorer with htmx, and the transparency log's
    card swapped in beside it when it changed since the page showed it (`?tlog=`), so the two
    cards' checkpoints and counts are read together."""
    _require_auditor(request)
    context = {**_status_context(request), "tlog_shown": witness_selectors.tree_head_key()}
    panel = render_to_string("audit/_status.html", context, request)
    if request.GET.get("tlog") == context["tlog_shown"]:
        return HttpResponse(panel)
    context.update(tlog=witness_selectors.tree_head(), oob=True)  # after its key, as above
    return HttpResponse(panel + render_to_string("audit/_tlog.html", context, request))


def _status_context(request: HttpRequest) -> dict:
    """The status panel's data; `?verifying=<time>` while a "Verify now" asked then is running."""
    status = selectors.chain_status()
    asked = parse_datetime(request.GET.get("verifying") or "")
    run = status["verification"]
    waiting = bool(asked and (run is None or run.finished_at < asked))
    return {"status": status, "verifying": asked.isoformat() if waiting else ""}


@login_required
def public_key(request: HttpRequest) -> HttpResponse:
    """The checkpoint verifier key, to verify an export offline with audit.export.verify."""
    _require_auditor(request)
    load_public_key()  # dev: creates the key pair on first use
    response = HttpResponse(
        public_key_path().read_text(encoding="utf-8"), content_type="text/plain"
    )
    response["Content-Disposition"] = 'attachment; filename="kiln-audit.pub"'
    return response


@login_required
@require_POST
def verify_now(request: HttpRequest) -> HttpResponse:
    """Queue a verification of the whole chain; the status panel shows its result."""
    try:
        services.verification_request(actor=actor_from_request(request))
    except Forbidden as exc:
        raise PermissionDenied(exc.message) from exc
    asked = timezone.now().isoformat()
    return redirect(f"{reverse('audit:explorer')}?{urlencode({'verifying': asked})}")
