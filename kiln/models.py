"""The kiln app's tables, each defined beside its subsystem and registered here.

Django loads an app's models from `<app>.models`; identity's live in
kiln/identity/models.py.
"""

from kiln.attention.models import AttentionDismissal
from kiln.identity.models import Membership, Team

__all__ = ["AttentionDismissal", "Membership", "Team"]
