"""Chaos API parts of the Chaos Mesh fault kinds and of verified reverts (canary/chaos/api.py
holds the experiment views).

- `ChaosMeshFields`: the create body's magnitude fields, one per field of `kinds.KINDS`, with the
  bounds documented from the same data the service checks (one 400 naming every field).
- `InjectionRecheckApi`: revert an unconfirmed injection again and read it back.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from canary.chaos import kinds
from canary.chaos import selectors as chaos_selectors
from canary.chaos.models import InjectionState
from canary.chaos.services.injection import fault_revert_recheck
from kiln.api_fields import StrictCharField, StrictSerializer
from kiln.errors import NotFound
from kiln.identity.drf import role_required
from kiln.identity.permissions import ENGINEER, actor_from_request
from kiln.openapi import documented, errors


def _field(param: kinds.Param) -> serializers.Field:
    """The serializer field of one magnitude field; the bounds are documented, the service checks them."""
    used_by = ", ".join(k.fault for k in kinds.KINDS.values() if k.param(param.name) is not None)
    description = f"{used_by}: {param.help or param.label}".rstrip(": ")
    field, schema = _shape(param)
    return documented(field, **schema, description=description)


def _shape(param: kinds.Param) -> tuple[serializers.Field, dict[str, Any]]:
    """A magnitude field by its type (optional, nullable), and what its JSON Schema adds."""
    optional = {"required": False, "allow_null": True}
    if param.type in ("int", "float"):
        cls = serializers.IntegerField if param.type == "int" else serializers.FloatField
        return cls(**optional), {"minimum": param.minimum, "maximum": param.maximum}
    if param.type == "choice":
        return serializers.ChoiceField(choices=param.choices, **optional), {}
    if param.type == "selector":
        label = {"type": "string", "minLength": 1, "maxLength": 63}
        field = serializers.DictField(child=StrictCharField(max_length=63), **optional)
        return field, {"type": "object", "additionalProperties": label}
    if param.type == "patterns":
        field = serializers.ListField(child=StrictCharField(max_length=253), **optional)
        return field, {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": kinds.MAX_DNS_PATTERNS,
        }
    return StrictCharField(max_length=63, allow_blank=True, **optional), {}


def _params() -> dict[str, kinds.Param]:
    found: dict[str, kinds.Param] = {}
    for kind in kinds.KINDS.values():
        for param in kind.params:
            found.setdefault(param.name, param)
    return found


# A serializer class whose declared fields the create body inherits (DRF collects declared fields
# from base classes), built from the kinds' data so the two cannot drift apart.
ChaosMeshFields = type(
    "ChaosMeshFields",
    (serializers.Serializer,),
    {name: _field(param) for name, param in _params().items()},
)


@extend_schema_serializer(component_name="InjectionRecheckResult")
class RecheckOutput(serializers.Serializer):
    """An injection after a recheck: confirmed gone, or still seen (the new evidence)."""

    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=InjectionState.values)
    confirmed = serializers.BooleanField()
    revert_confirmed = serializers.BooleanField(allow_null=True)
    evidence = serializers.ListField(child=serializers.JSONField())


class InjectionRecheckApi(APIView):
    """Revert an unconfirmed injection again and read it back: confirmed once the fault is seen gone."""

    permission_classes = [role_required(ENGINEER)]

    @extend_schema_serializer(component_name="InjectionRecheck")
    class InputSerializer(StrictSerializer):
        note = documented(
            StrictCharField(max_length=300, required=False, allow_blank=True, default=""),
            description="What was done about the fault (removed by hand, ...); kept on record "
            "with the confirmation.",
        )

    @extend_schema(
        operation_id="chaos_injection_recheck",
        request=InputSerializer,
        responses={200: RecheckOutput, **errors(409)},
    )
    def post(self, request: Request, experiment_id, injection_id: int) -> Response:
        actor = actor_from_request(request)
        note = self.InputSerializer.validated(request)["note"]
        exp = chaos_selectors.experiment_get(viewer=actor, experiment_id=experiment_id)
        injection = exp.injections.filter(pk=injection_id).first()
        if injection is None:
            raise NotFound("No such injection.")
        confirmed = fault_revert_recheck(injection_id=injection.pk, actor=actor, note=note)
        injection.refresh_from_db()
        body = {
            "id": injection.pk,
            "state": injection.state,
            "confirmed": confirmed,
            "revert_confirmed": injection.revert_confirmed,
            "evidence": injection.revert_evidence,
        }
        return Response(RecheckOutput(body).data)
