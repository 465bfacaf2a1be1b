"""Lift sign-in locks (login throttling) before their cool-off ends, audited."""

from __future__ import annotations

import getpass
import ipaddress

from django.core.management.base import BaseCommand, CommandError

from kiln.identity import services


class Command(BaseCommand):
    help = (
        "Lift sign-in locks early: a username's (from every address), an address's, both "
        "narrowed together, or --all. Audited as kiln.login.unlocked."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", help="the username whose locks to lift")
        parser.add_argument("--address", help="only failures counted from this client address")
        parser.add_argument("--all", action="store_true", help="every lock and failure count")

    def handle(self, *args, **opts):
        username, address = opts["username"], opts["address"]
        if not (username or address or opts["all"]):
            raise CommandError("name a username, --address ADDRESS, or --all")
        if opts["all"] and (username or address):
            raise CommandError("--all lifts every lock; leave out the username and --address")
        if address:
            try:
                address = str(ipaddress.ip_address(address))
            except ValueError as exc:
                raise CommandError(f"--address: {address!r} is not an IP address") from exc
        try:
            operator = getpass.getuser()
        except (KeyError, OSError):
            operator = "unknown"
        removed = services.login_lockout_lift(
            username=username, ip_address=address, via=f"manage.py login_unlock ({operator})"
        )
        self.stdout.write(f"lifted: {removed} failure counter{'s' if removed != 1 else ''} removed")
