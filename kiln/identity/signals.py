"""Signal receivers of identity: each only calls a service (kiln.identity.services)."""

from __future__ import annotations

from axes.signals import user_locked_out
from django.conf import settings
from django.dispatch import receiver

from kiln.identity import services, throttle


@receiver(user_locked_out, dispatch_uid="kiln.identity.login_locked_out")
def login_locked_out(sender, request, username, ip_address, **kwargs) -> None:
    """Sign-in is refused for a username from an address, or for an address: audit it."""
    scope = throttle.lock_scope(request)
    services.login_lockout_record(
        username=username or "",
        ip_address=ip_address or "",
        scope=scope,
        failures=getattr(request, "axes_failures_since_start", None),
        limit=throttle.lock_limit(scope),
        cooloff_minutes=settings.KILN_LOGIN_COOLOFF_MINUTES,
    )
