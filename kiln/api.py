"""The identity API: who am I, which teams exist, and who belongs to them.

Thin edges: parse with an InputSerializer, call one service or selector,
render with an OutputSerializer. Permissions come from kiln.identity.permissions.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.identity import permissions, selectors, services
from kiln.identity.drf import role_required
from kiln.openapi import errors
from kiln.validators import DNS_LABEL

HasAnyRole = role_required(*permissions.ROLES)


class CanManageTeams(BasePermission):
    """Platform admins create teams and change their members."""

    message = "Only platform admins manage teams."

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return permissions.can_manage_teams(permissions.actor_from_request(request))


@extend_schema_serializer(component_name="Team")
class TeamOutputSerializer(serializers.Serializer):
    """A team with its members' user names."""

    slug = serializers.CharField()
    name = serializers.CharField()
    members = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()

    def to_representation(self, team):
        return {
            "slug": team.slug,
            "name": team.name,
            "members": selectors.team_member_usernames(team=team),
            "created_at": serializers.DateTimeField().to_representation(team.created_at),
        }


class MeApi(APIView):
    """The caller as Kiln sees them: subject, roles and teams."""

    permission_classes = [IsAuthenticated]

    @extend_schema_serializer(component_name="Me")
    class OutputSerializer(serializers.Serializer):
        sub = serializers.CharField()
        roles = serializers.ListField(child=serializers.CharField())
        teams = serializers.ListField(child=serializers.CharField())
        authenticated_by = serializers.ChoiceField(choices=["token", "session"])

    @extend_schema(operation_id="me_retrieve", responses=OutputSerializer)
    def get(self, request):
        actor = permissions.actor_from_request(request)
        data = {
            "sub": actor.username,
            "roles": sorted(actor.roles),
            "teams": sorted(actor.teams),
            "authenticated_by": "token" if isinstance(request.auth, dict) else "session",
        }
        return Response(self.OutputSerializer(data).data)


class TeamListCreateApi(APIView):
    """GET: the teams the caller may see. POST: create a team (platform admins)."""

    @extend_schema_serializer(component_name="TeamCreate")
    class InputSerializer(StrictSerializer):
        slug = StrictCharField(max_length=63, validators=[DNS_LABEL])
        name = StrictCharField(max_length=200)

    def get_permissions(self):
        if self.request.method == "POST":
            return [CanManageTeams()]
        return [HasAnyRole()]

    @extend_schema(operation_id="teams_list", responses=TeamOutputSerializer(many=True))
    def get(self, request):
        teams = selectors.team_list(viewer=permissions.actor_from_request(request))
        return Response(TeamOutputSerializer(teams, many=True).data)

    @extend_schema(
        operation_id="teams_create",
        request=InputSerializer,
        responses={201: TeamOutputSerializer, **errors(409)},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team = services.team_create(
            actor=permissions.actor_from_request(request), **data.validated_data
        )
        return Response(TeamOutputSerializer(team).data, status=status.HTTP_201_CREATED)


class TeamMemberAddApi(APIView):
    """Add an existing user to a team (platform admins)."""

    permission_classes = [CanManageTeams]

    @extend_schema_serializer(component_name="TeamMemberAdd")
    class InputSerializer(StrictSerializer):
        username = StrictCharField(max_length=150)

    @extend_schema(
        operation_id="teams_members_create",
        request=InputSerializer,
        responses={201: TeamOutputSerializer, **errors(409)},
    )
    def post(self, request, slug: str):
        actor = permissions.actor_from_request(request)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team = selectors.team_get(viewer=actor, slug=slug)
        services.membership_add(actor=actor, team=team, username=data.validated_data["username"])
        team = selectors.team_get(viewer=actor, slug=slug)  # with its new member
        return Response(TeamOutputSerializer(team).data, status=status.HTTP_201_CREATED)
