"""Print an RS256 bearer token signed with the configured private key."""

from django.core.management.base import BaseCommand, CommandError

from kiln.identity.keys import KeysUnavailable
from kiln.identity.signing import issue_token


class Command(BaseCommand):
    help = "Print a signed API token: kiln_token --sub alice --roles engineer --team payments --ttl 3600"

    def add_arguments(self, parser):
        parser.add_argument("--sub", required=True, help="subject (user name)")
        parser.add_argument("--roles", required=True, help="comma-separated roles")
        parser.add_argument("--team", default=None, help="team slug")
        parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds")

    def handle(self, *args, **opts):
        roles = [r.strip() for r in opts["roles"].replace(" ", ",").split(",") if r.strip()]
        try:
            token = issue_token(
                sub=opts["sub"], roles=roles, team=opts["team"], ttl_seconds=opts["ttl"]
            )
        except (ValueError, KeysUnavailable, OSError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(token)
