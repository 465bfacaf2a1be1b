"""Print an RS256 bearer token signed with the configured private key."""

import re

from django.core.management.base import BaseCommand, CommandError

from kiln.identity.keys import KeysUnavailable
from kiln.identity.signing import issue_token

# The slug rule of kiln.identity.models.Team (DNS-1123 label); memberships read at most 100 teams.
TEAM_SLUG = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_TEAMS = 100


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.replace(" ", ",").split(",") if part.strip()]


class Command(BaseCommand):
    help = (
        "Print a signed API token: kiln_token --sub alice --roles engineer --team payments "
        "[--teams payments,search] --ttl 3600"
    )

    def add_arguments(self, parser):
        parser.add_argument("--sub", required=True, help="subject (user name)")
        parser.add_argument("--roles", required=True, help="comma-separated roles")
        parser.add_argument("--team", default=None, help="team slug")
        parser.add_argument(
            "--teams", default=None, help="comma-separated team slugs (the `teams` list claim)"
        )
        parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds")

    def handle(self, *args, **opts):
        roles = _split(opts["roles"])
        teams = None if opts["teams"] is None else list(dict.fromkeys(_split(opts["teams"])))
        if teams is not None:
            bad = [t for t in teams if not TEAM_SLUG.match(t)]
            if bad:
                raise CommandError(f"--teams: {', '.join(bad)} is not a team slug (DNS-1123 label)")
            if len(teams) > MAX_TEAMS:
                raise CommandError(f"--teams: at most {MAX_TEAMS} teams are read from a token")
        try:
            token = issue_token(
                sub=opts["sub"],
                roles=roles,
                team=opts["team"],
                teams=teams,
                ttl_seconds=opts["ttl"],
            )
        except (ValueError, KeysUnavailable, OSError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(token)
