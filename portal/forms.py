"""Portal forms: the environment request form shares its field rules with the API."""

from __future__ import annotations

from typing import Any

from django import forms

from portal.conf import MAX_CPU, MAX_GPU, MAX_MEMORY_GIB
from portal.validation import ENV_CLASSES, WORKLOAD_CLASSES, field_errors


class EnvironmentRequestForm(forms.Form):
    """Ask for an environment."""

    team = forms.ChoiceField(choices=[])
    name = forms.CharField(
        max_length=40, help_text="DNS-1123 label: lower-case letters, digits and '-'."
    )
    env_class = forms.ChoiceField(
        label="Class", choices=[(c, c) for c in ENV_CLASSES], initial="dev"
    )
    ttl_hours = forms.IntegerField(label="TTL (hours)", min_value=1, initial=24)
    workload_class = forms.ChoiceField(
        choices=[(c, c) for c in WORKLOAD_CLASSES], initial="standard"
    )
    cpu = forms.IntegerField(label="CPU cores", min_value=1, max_value=MAX_CPU, initial=4)
    memory_gib = forms.IntegerField(
        label="Memory (GiB)", min_value=1, max_value=MAX_MEMORY_GIB, initial=16
    )
    gpu = forms.IntegerField(label="GPUs", min_value=0, max_value=MAX_GPU, initial=0)
    tenant_control_plane = forms.BooleanField(label="Tenant control plane (Kamaji)", required=False)
    spot_node_pool = forms.BooleanField(label="Spot node pool (Karpenter)", required=False)
    database = forms.BooleanField(label="PostgreSQL database (Crossplane)", required=False)
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), required=False, max_length=2000
    )

    def __init__(self, *args: Any, teams: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t, t) for t in teams]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:
            for field, messages in field_errors(data).items():
                for message in messages:
                    self.add_error(field if field in self.fields else None, message)
        return data


class ReasonForm(forms.Form):
    """A free-text reason (required to reject)."""

    reason = forms.CharField(max_length=2000, required=False)


class ExtendForm(forms.Form):
    """Extend the TTL by some hours."""

    hours = forms.IntegerField(min_value=1, max_value=8760)
