"""Asking Argo CD to refresh an Application right after a commit, instead of waiting for its poll.

Argo CD notices a new commit when it polls the repository (every
`timeout.reconciliation`, 180 s by default) or when something asks it to refresh. The gitops
backend asks, after every commit it pushes: `GET /api/v1/applications/<name>?refresh=normal`
(Argo CD's ApplicationService `Get` with the `refresh` parameter, the call `argocd app get
--refresh` makes), with a bearer token. A refresh is an optimisation, never a condition of
delivery: the commit is already pushed, so a refusal or a timeout is logged and counted and
Argo CD's poll syncs the commit as before.

Settings: `KILN_ARGOCD_URL` (unset: no refresh, the poll alone), `KILN_ARGOCD_TOKEN_FILE`,
`KILN_ARGOCD_APPLICATION` (the Application syncing the environments' platform directories,
`kiln-environments`), `KILN_ARGOCD_APP_NAMESPACE`.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from django.conf import settings

log = logging.getLogger("kiln.cluster.argocd")

REFRESH_TIMEOUT_SECONDS = 5.0


class ArgoCDRefresher:
    """Asks one Argo CD Application to refresh (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        application: str = "kiln-environments",
        app_namespace: str = "argocd",
        token: str = "",
        timeout: float = REFRESH_TIMEOUT_SECONDS,
    ) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"KILN_ARGOCD_URL must be an http(s) URL, not {url!r}")
        self.url = url.rstrip("/")
        self.application = application
        self.app_namespace = app_namespace
        self.token = token
        self.timeout = timeout
        self.refreshed = 0
        self.failed = 0

    @classmethod
    def from_settings(cls) -> ArgoCDRefresher | None:
        """The configured refresher, or None when `KILN_ARGOCD_URL` is unset."""
        url = getattr(settings, "KILN_ARGOCD_URL", "") or ""
        if not url:
            return None
        token_file = getattr(settings, "KILN_ARGOCD_TOKEN_FILE", "") or ""
        return cls(
            url,
            application=getattr(settings, "KILN_ARGOCD_APPLICATION", "") or "kiln-environments",
            app_namespace=getattr(settings, "KILN_ARGOCD_APP_NAMESPACE", "") or "argocd",
            token=Path(token_file).read_text().strip() if token_file else "",
        )

    def refresh_url(self) -> str:
        """The Application GET that asks for a normal refresh."""
        query = urllib.parse.urlencode({"refresh": "normal", "appNamespace": self.app_namespace})
        name = urllib.parse.quote(self.application, safe="")
        return f"{self.url}/api/v1/applications/{name}?{query}"

    def refresh(self) -> bool:
        """Ask for a refresh; True if Argo CD accepted it. Never raises: the poll is the fallback."""
        request = urllib.request.Request(self.refresh_url(), method="GET")  # noqa: S310 - http(s) only, checked above
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - URL from settings
                ok = 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError) as exc:
            ok = False
            log.warning(
                "argocd refresh of %s failed: %s; its poll will sync the commit",
                self.application,
                exc,
            )
        if ok:
            self.refreshed += 1
        else:
            self.failed += 1
        return ok
