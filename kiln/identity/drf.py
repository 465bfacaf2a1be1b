"""DRF permission classes; each asks `kiln.identity.permissions`."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from kiln.identity import permissions


class HasKilnRole(BasePermission):
    """The API's default: an authenticated caller holding some Kiln role (a valid token or
    session without one is a 403 everywhere but `GET /api/v1/me/`)."""

    message = "You hold no Kiln role (engineer, approver, auditor, platform-admin)."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return permissions.has_any_role(permissions.actor_from_request(request))


class HasRole(BasePermission):
    """Allow authenticated actors holding one of `roles` (platform admins always)."""

    roles: tuple[str, ...] = ()
    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return permissions.has_role(permissions.actor_from_request(request), *self.roles)


def role_required(*roles: str) -> type[HasRole]:
    """`permission_classes = [role_required("approver")]`."""
    return type(
        f"HasRole_{'_'.join(r.replace('-', '_') for r in roles)}", (HasRole,), {"roles": roles}
    )


IsEngineer = role_required(permissions.ENGINEER)
IsApprover = role_required(permissions.APPROVER)
IsAuditor = role_required(permissions.AUDITOR)
IsPlatformAdmin = role_required(permissions.PLATFORM_ADMIN)
