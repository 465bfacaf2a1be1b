"""Run all of Kiln in one process: ASGI server, Celery worker and beat, in-process services."""

from __future__ import annotations

import signal
import socket
import sys

import uvicorn
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from kiln import proxies, standalone
from kiln.identity.keys import KeysUnavailable
from kiln.identity.signing import ensure_dev_keys, issue_token
from kiln.seed import USERS, seed_demo


def _exit_cleanly(signum, frame) -> None:
    sys.exit(0)


def demo_tokens(ttl_seconds: int = 12 * 3600) -> list[tuple[str, str]]:
    """One signed token per role, for the first demo user holding it."""
    first_per_role = {u.role: u for u in reversed(USERS)}
    users = sorted(first_per_role.values(), key=USERS.index)
    return [
        (u.role, issue_token(sub=u.username, roles=[u.role], team=u.team, ttl_seconds=ttl_seconds))
        for u in users
    ]


class Command(BaseCommand):
    help = (
        "Start standalone mode: migrate, seed demo data, print logins and tokens, serve on --port."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-seed", action="store_true", help="skip the demo data")

    def handle(self, *args, **opts):
        host, port = opts["host"], opts["port"]
        with socket.socket() as probe:
            if probe.connect_ex((host, port)) == 0:
                raise CommandError(f"{host}:{port} is already in use; pick another with --port (make run PORT=...)")
        stage = standalone.StageLines(self._line)
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        ensure_dev_keys()
        stage("migrating", f"database {settings.DATABASES['default']['NAME']}")
        call_command("migrate", interactive=False, verbosity=0)
        if not opts["no_seed"]:
            stage("seeding", "demo teams, users, tokens, pricing and cluster")
            seed_demo()

        # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal;
        # turning SIGTERM into SystemExit lets the in-process services stop in `finally`.
        # SIGINT too: Ctrl-C in `make run` stops cleanly instead of ending in a traceback.
        signal.signal(signal.SIGTERM, _exit_cleanly)
        signal.signal(signal.SIGINT, _exit_cleanly)
        stage("starting", "worker, beat, audit writer and the web server")
        runtime = standalone.build_runtime()
        runtime.start()
        stage("ready", f"http://{host}:{port}/")
        self._print_banner(host, port, seeded=not opts["no_seed"])
        try:
            config = uvicorn.Config(
                "kiln.asgi:application",
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
                ws="websockets-sansio",
                # X-Forwarded-For believed from KILN_TRUSTED_PROXIES only (none by default),
                # as Kiln's own client address does; uvicorn's default trusts loopback.
                **proxies.uvicorn_options(settings.KILN_TRUSTED_PROXIES),
            )
            uvicorn.Server(config).run()
        finally:
            runtime.stop()
            self.stdout.write("Kiln stopped.")

    def _line(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()  # a stage line shows as it starts, not when the banner does

    def _print_banner(self, host: str, port: int, *, seeded: bool) -> None:
        out = self.stdout.write
        out("")
        out(f"Kiln standalone is running on http://{host}:{port}/  (Ctrl-C stops it)")
        out(
            f"  database {settings.DATABASES['default']['NAME']}, simulated cluster, in-process worker and beat"
        )
        if seeded:
            out("")
            out("Demo logins (username / password / role / team):")
            for u in USERS:
                out(f"  {u.username:<6} {u.password:<18} {u.role:<15} {u.team or '-'}")
            out("")
            try:
                tokens = demo_tokens()
            except (OSError, ValueError, KeysUnavailable) as exc:
                out(f"API tokens: none printed ({exc.__class__.__name__}: {exc}).")
                out("  KILN_JWT_JWKS is yours: get tokens from your identity provider, or set")
                out("  KILN_JWT_PRIVATE_KEY (and KILN_JWT_KID) to a key that JWKS publishes.")
            else:
                out("API tokens (valid 12 h), one per role; paste the lines into a shell:")
                for role, token in tokens:
                    out(f"  export KILN_TOKEN_{role.upper().replace('-', '_')}={token}")
                out("")
                out(
                    f'  curl -H "Authorization: Bearer $KILN_TOKEN_ENGINEER" http://{host}:{port}/api/v1/me/'
                )
            out("")
            out(
                f"Sign-in locks after {settings.KILN_LOGIN_FAILURE_LIMIT} wrong passwords for one "
                f"user from one address ({settings.KILN_LOGIN_ADDRESS_FAILURE_LIMIT} over all "
                f"users), for {settings.KILN_LOGIN_COOLOFF_MINUTES:g} minutes. To lift it now:"
            )
            out("  env -u DATABASE_URL -u REDIS_URL .venv/bin/python manage.py login_unlock <username>")
            out("  (or --address <ip>, or --all)")
        out("", ending="\n")
        self.stdout.flush()
