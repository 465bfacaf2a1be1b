"""Seed the demo teams, users, roles and pricing (idempotent)."""

from django.core.management.base import BaseCommand

from kiln.seed import seed_demo


class Command(BaseCommand):
    help = "Create demo teams, one user per role, pricing and demo services. Safe to run again."

    def handle(self, *args, **opts):
        created = seed_demo()
        if created:
            self.stdout.write(f"seeded {len(created)} objects: {', '.join(created)}")
        else:
            self.stdout.write("demo data already present; nothing to do")
