"""Field validators shared by every app's models and serializers."""

from __future__ import annotations

from django.core.validators import RegexValidator

# RFC 1123 label as Kubernetes uses it for namespaces and label values (DNS-1123 label).
DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters.",
)

__all__ = ["DNS_LABEL"]
