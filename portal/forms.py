"""Portal forms: the environment request form shares its field rules with the API."""

from __future__ import annotations

from typing import Any

from django import forms

from kiln.form_errors import add_service_errors, values_for_service
from portal.conf import (
    MAX_CPU,
    MAX_GPU,
    MAX_GPU_PER_CLASS,
    MAX_MEMORY_GIB,
    MAX_TTL_HOURS,
    SPOT_CLASSES,
)
from portal.validation import ENV_CLASSES, WORKLOAD_CLASSES, field_errors


def _component(label: str, help_text: str) -> forms.BooleanField:
    """An optional component of the environment, a checkbox (the namespace is always there)."""
    return forms.BooleanField(label=label, required=False, help_text=help_text)


class EnvironmentRequestForm(forms.Form):
    """Ask for an environment."""

    team = forms.ChoiceField(choices=[], help_text="The team that owns and pays for it.")
    name = forms.CharField(
        max_length=40,
        help_text="DNS-1123 label: lower-case letters, digits and '-'. "
        "The namespace is <team>-<name>.",
    )
    env_class = forms.ChoiceField(
        label="Class",
        choices=[(c, c) for c in ENV_CLASSES],
        initial="dev",
        help_text="ephemeral and dev are approved automatically; staging needs an approver, "
        "prod two.",
    )
    # Bounds are checked by the shared rules (portal.validation.field_errors), in the API's
    # words; the widgets carry them only as the browser's hints.
    ttl_hours = forms.IntegerField(
        label="TTL (hours)",
        widget=forms.NumberInput(attrs={"min": 1}),
        initial=24,
        help_text="Torn down automatically when it runs out; you can extend it later.",
    )
    workload_class = forms.ChoiceField(
        choices=[(c, c) for c in WORKLOAD_CLASSES],
        initial="latency-sensitive",
        help_text="latency-sensitive pods never land on spot nodes; standard and batch may.",
    )
    cpu = forms.IntegerField(
        label="CPU cores",
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_CPU}),
        initial=4,
        help_text=f"ResourceQuota for the namespace, 1 to {MAX_CPU}.",
    )
    memory_gib = forms.IntegerField(
        label="Memory (GiB)",
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_MEMORY_GIB}),
        initial=16,
        help_text=f"ResourceQuota for the namespace, 1 to {MAX_MEMORY_GIB} GiB.",
    )
    gpu = forms.IntegerField(
        label="GPUs", widget=forms.NumberInput(attrs={"min": 0, "max": MAX_GPU}), initial=0
    )
    tenant_control_plane = _component(
        "Tenant control plane (Kamaji)",
        "Your own Kubernetes API server (a Kamaji TenantControlPlane), so you can install CRDs "
        "and cluster-scoped objects; you get its kubeconfig.",
    )
    spot_node_pool = _component(
        "Spot node pool (Karpenter)",
        "A Karpenter NodePool of cheaper spot nodes that can be reclaimed at any time, spread "
        "over at least four instance types and three zones.",
    )
    database = _component(
        "PostgreSQL database (Crossplane)",
        "A Crossplane PostgreSQLInstance claim; its connection details land in a Secret in your "
        "namespace.",
    )
    justification = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        max_length=2000,
        help_text="Why you need it; prod needs at least 20 characters.",
    )

    def __init__(self, *args: Any, teams: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t, t) for t in teams]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        # The shared rules run on every field Django accepted, even when another field was
        # refused, so the form names all its problems in one round (as the API does).
        add_service_errors(self, field_errors(values_for_service(self)))
        return data


class ReasonForm(forms.Form):
    """A free-text reason (required to reject)."""

    reason = forms.CharField(max_length=2000, required=False)


class ExtendForm(forms.Form):
    """Extend the TTL by some hours."""

    # No maximum here: the class's, which the service names with what is left, is the one.
    hours = forms.IntegerField(min_value=1)


def class_limits() -> dict[str, dict[str, Any]]:
    """What each environment class allows, for the hints beside the request form's fields."""
    return {
        env_class: {
            "ttl_hours": MAX_TTL_HOURS[env_class],
            "gpu": MAX_GPU_PER_CLASS[env_class],
            "spot": env_class in SPOT_CLASSES,
        }
        for env_class in ENV_CLASSES
    }
