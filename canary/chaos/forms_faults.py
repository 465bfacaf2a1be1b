"""The create form's magnitude fields of the Chaos Mesh kinds, built from `kinds.KINDS` (the same
data the service checks, so the form offers what the API takes).

Each field, and each HTTP-only field, says which kinds it belongs to (`kinds_attr`), so the page
shows only the chosen kind's fields (static/chaos/faults.js); the service still checks all.
"""

from __future__ import annotations

from typing import Any

from django import forms

from canary.chaos import kinds

# The older faults' own fields, for the page to show with their kinds only. Service is every
# fault's: an error-rate or latency stop reads its metrics there, whatever the fault.
HTTP_FIELDS = {
    "percent": "http-delay http-abort",
    "delay_ms": "http-delay",
    "abort_http_status": "http-abort",
}


def _params() -> dict[str, tuple[kinds.Param, list[str]]]:
    found: dict[str, tuple[kinds.Param, list[str]]] = {}
    for kind in kinds.KINDS.values():
        for param in kind.params:
            found.setdefault(param.name, (param, []))[1].append(kind.fault)
    return found


def _form_field(param: kinds.Param, faults: list[str]) -> forms.Field:
    help_text = param.help
    if param.minimum is not None:
        help_text = f"{help_text} ({param.minimum:g} to {param.maximum:g}{param.unit})".strip()
    common = {"required": False, "label": param.label, "help_text": help_text}
    if param.type == "int":
        field: forms.Field = forms.IntegerField(**common)
    elif param.type == "float":
        field = forms.FloatField(**common)
    elif param.type == "choice":
        field = forms.ChoiceField(
            choices=[("", f"default: {param.default}")] + [(c, c) for c in param.choices],
            **common,
        )
    elif param.type == "selector":
        field = forms.CharField(max_length=500, **common)
    elif param.type == "patterns":
        field = forms.CharField(max_length=2000, **common)
    else:
        field = forms.CharField(max_length=63, **common)
    field.kinds_attr = " ".join(faults)
    return field


class ChaosMeshFormFields(forms.Form):
    """Magnitude fields of every Chaos Mesh kind, placed after the HTTP faults' fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, (param, faults) in _params().items():
            self.fields[name] = _form_field(param, faults)
        for name, faults in HTTP_FIELDS.items():
            if name in self.fields:
                self.fields[name].kinds_attr = faults
        names = list(self.fields)
        own = [n for n in names if n in kinds.PARAM_FIELDS]
        rest = [n for n in names if n not in kinds.PARAM_FIELDS]
        at = rest.index("percent") + 1 if "percent" in rest else len(rest)
        self.order_fields(rest[:at] + own + rest[at:])

    def _clean_labels(self, name: str) -> dict[str, str] | None:
        text = (self.cleaned_data.get(name) or "").strip()
        if not text:
            return None
        pairs: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise forms.ValidationError("write key=value pairs separated by commas")
            pairs[key.strip()] = value.strip()
        return pairs

    def clean_target_selector(self) -> dict[str, str] | None:
        return self._clean_labels("target_selector")

    def clean_dns_patterns(self) -> list[str] | None:
        text = self.cleaned_data.get("dns_patterns") or ""
        patterns = [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]
        return patterns or None

    def kind_data(self, values: dict[str, Any]) -> dict[str, Any]:
        """The magnitude fields of `values` (kiln.form_errors' values_for_service), empty ones left out."""
        return {
            name: values.get(name)
            for name in kinds.PARAM_FIELDS
            if values.get(name) not in (None, "", [], {})
        }
