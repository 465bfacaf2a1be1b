"""Login throttling (django-axes): which address a login comes from, and what a locked-out person sees.

Failed session logins are counted per (username, client address) pair: at
`KILN_LOGIN_FAILURE_LIMIT` failures within `KILN_LOGIN_COOLOFF_MINUTES` that pair is
locked, and every login for that username from that address is refused, the right
password too, until the cool-off has passed. One person's typos lock only themselves
from where they are: a colleague behind the same address, or the same account signing
in from elsewhere (root included), is not affected. Spraying many usernames from one
address is caught by a second, higher limit: `KILN_LOGIN_ADDRESS_FAILURE_LIMIT` failures
from one address over every username lock that address (`LoginThrottleHandler`).

The client address believes `X-Forwarded-For` only from `KILN_TRUSTED_PROXIES`
(kiln/proxies.py), the same list uvicorn is started with. Bearer tokens never go
through a password login, so the API is not throttled here.
"""

from __future__ import annotations

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from kiln import proxies

LOCKED_STATUS = 429
# Which lock refused a sign-in, kept on the request for the page and the audit event.
SCOPE_ATTRIBUTE = "kiln_lock_scope"
SCOPE_ACCOUNT = "account"  # this username from this address
SCOPE_ADDRESS = "address"  # every username from this address


def client_address(request: HttpRequest) -> str:
    """The address a login comes from (AXES_CLIENT_IP_CALLABLE): kiln.proxies' rule."""
    return proxies.client_address(
        request.META.get("REMOTE_ADDR"),
        request.META.get("HTTP_X_FORWARDED_FOR", ""),
        settings.KILN_TRUSTED_PROXIES,
    )


def lock_scope(request: HttpRequest) -> str:
    """Which lock refused this request: SCOPE_ACCOUNT (the pair) or SCOPE_ADDRESS."""
    return getattr(request, SCOPE_ATTRIBUTE, SCOPE_ACCOUNT)


def lock_limit(scope: str) -> int:
    """The failures that set the lock of `scope`."""
    if scope == SCOPE_ADDRESS:
        return settings.KILN_LOGIN_ADDRESS_FAILURE_LIMIT
    return settings.KILN_LOGIN_FAILURE_LIMIT


class LoginThrottleHandler(AxesDatabaseHandler):
    """axes' database handler (the pair lock) plus a lock on an address failing for many usernames."""

    def address_failures(self, request: HttpRequest) -> int:
        """Failures from the request's address over every username within the cool-off."""
        attempts = AccessAttempt.objects.filter(
            ip_address=request.axes_ip_address,
            attempt_time__gte=get_cool_off_threshold(request),
        )
        return attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0

    def is_locked(self, request: HttpRequest, credentials: dict | None = None) -> bool:
        """Locked when the pair is, or the whole address is (noting which on the request)."""
        if super().is_locked(request, credentials):
            setattr(request, SCOPE_ATTRIBUTE, SCOPE_ACCOUNT)
            return True
        if self.address_failures(request) >= settings.KILN_LOGIN_ADDRESS_FAILURE_LIMIT:
            setattr(request, SCOPE_ATTRIBUTE, SCOPE_ADDRESS)
            return True
        return False

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs) -> None:
        """Count the failure (axes); if it brings the address to its limit, lock it now."""
        super().user_login_failed(sender, credentials, request=request, **kwargs)
        if request is None or getattr(request, "axes_locked_out", False):
            return
        if self.is_whitelisted(request, credentials):
            return
        failures = self.address_failures(request)
        if failures < settings.KILN_LOGIN_ADDRESS_FAILURE_LIMIT:
            return
        setattr(request, SCOPE_ATTRIBUTE, SCOPE_ADDRESS)
        request.axes_failures_since_start = failures
        request.axes_locked_out = True
        request.axes_credentials = credentials
        user_locked_out.send(
            "axes",
            request=request,
            username=get_client_username(request, credentials),
            ip_address=request.axes_ip_address,
        )


def lockout_message(scope: str = SCOPE_ACCOUNT) -> str:
    """What a locked-out person reads: what is locked, for how long, and who can lift it."""
    minutes = settings.KILN_LOGIN_COOLOFF_MINUTES
    wait = f"{minutes:g} minute{'s' if minutes != 1 else ''}"
    if scope == SCOPE_ADDRESS:
        what = (
            "Too many failed sign-ins from your network address, over several accounts. "
            f"Signing in from this address is paused for {wait};"
        )
    else:
        what = (
            "Too many failed sign-ins for this account from your network address. "
            f"Signing in to it from here is paused for {wait} (other accounts, and this "
            "one from elsewhere, are not affected);"
        )
    return (
        f"{what} try again then, or ask a platform admin to lift the lock sooner "
        "(manage.py login_unlock)."
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
        "lockout_message": lockout_message(lock_scope(request)),
        "next": request.POST.get("next", "") or request.GET.get("next", ""),
    }
    response = render(request, "registration/login.html", context, status=LOCKED_STATUS)
    response["Retry-After"] = str(int(settings.KILN_LOGIN_COOLOFF_MINUTES * 60))
    return response
