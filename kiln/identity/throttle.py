"""Login throttling (django-axes): which address a login comes from, and what a locked-out person sees.

Failed session logins are counted per username and per client address,
independently (`AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]`); at
`KILN_LOGIN_FAILURE_LIMIT` failures within `KILN_LOGIN_COOLOFF_MINUTES` either one
is locked, and every login for it is refused, the right password too, until the
cool-off has passed. Bearer tokens never go through a password login, so the
API is not throttled here.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

LOCKED_STATUS = 429


def client_address(request: HttpRequest) -> str:
    """The address a login comes from (AXES_CLIENT_IP_CALLABLE).

    REMOTE_ADDR, unless `KILN_LOGIN_PROXY_HOPS` proxies of our own stand in front:
    each appends the address it saw to X-Forwarded-For, so the client is the entry
    that many places from the right (entries further left are the client's own claim).
    """
    hops = settings.KILN_LOGIN_PROXY_HOPS
    remote = request.META.get("REMOTE_ADDR") or "unknown"
    if hops <= 0:
        return remote
    forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [a for a in forwarded if a]
    return forwarded[-hops] if len(forwarded) >= hops else remote


def lockout_message() -> str:
    """What a locked-out person reads: what happened, for how long, and who can help."""
    minutes = settings.KILN_LOGIN_COOLOFF_MINUTES
    wait = f"{minutes:g} minute{'s' if minutes != 1 else ''}"
    return (
        "Too many failed sign-ins for this account or from your network. "
        f"Sign-in is paused for {wait}; try again then, or ask a platform admin."
    )


def lockout_response(request: HttpRequest, *args, **kwargs) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the sign-in page again, with the lockout explained (429).

    Takes (request, original_response, credentials) or (request, credentials), as
    axes calls it from its sync and its async middleware.
    """
    username = request.POST.get("username", "")[:150] if request.method == "POST" else ""
    form = AuthenticationForm(request, initial={"username": username})
    context = {
        "form": form,
        "lockout_message": lockout_message(),
        "next": request.POST.get("next", "") or request.GET.get("next", ""),
    }
    response = render(request, "registration/login.html", context, status=LOCKED_STATUS)
    response["Retry-After"] = str(int(settings.KILN_LOGIN_COOLOFF_MINUTES * 60))
    return response
