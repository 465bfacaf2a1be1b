"""Pages of the attention list: the home page's card (an htmx partial), dismissing an item, and
the feed the in-page notifications poll. Thin: the selectors and the service do the work."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from kiln.attention.selectors import attention_list
from kiln.attention.services import attention_dismiss
from kiln.errors import KilnError
from kiln.identity.permissions import actor_from_request


def card_context(request: HttpRequest, error: str = "") -> dict:
    """What templates/kiln/_attention.html shows: the viewer's items and any error."""
    return {"attention": attention_list(viewer=actor_from_request(request)), "error": error}


@login_required
@require_GET
def attention_card(request: HttpRequest) -> HttpResponse:
    """The home page's "Needs your attention" card, refreshed when notifications see new items."""
    return render(request, "kiln/_attention.html", card_context(request))


@login_required
@require_GET
def attention_feed(request: HttpRequest) -> JsonResponse:
    """The viewer's undismissed items as JSON, polled by every page for its notifications."""
    items = attention_list(viewer=actor_from_request(request))
    return JsonResponse({"items": [i.as_dict() for i in items]})


@login_required
@require_POST
def attention_dismiss_view(request: HttpRequest) -> HttpResponse:
    """Dismiss one item; htmx gets the card back, a plain form post the home page."""
    htmx = request.headers.get("HX-Request") == "true"
    try:
        attention_dismiss(actor=actor_from_request(request), key=request.POST.get("key", ""))
    except KilnError as exc:
        if htmx:
            response = render(request, "kiln/_attention.html", card_context(request, exc.message))
            response.status_code = exc.http_status
            return response
        messages.error(request, exc.message)
        response = redirect("home")
        return response
    if htmx:
        return render(request, "kiln/_attention.html", card_context(request))
    messages.success(request, "Dismissed.")
    return redirect("home")
