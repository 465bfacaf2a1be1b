"""Forms of the scheduler pages."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from kiln.widgets import decimal_text
from scheduler import scoring

UNLABELLED = "unlabelled"


DECIMAL_WIDGET = decimal_text()


class ScoreExplainForm(forms.Form):
    """A sample pod to score against the current nodes."""

    cpu = forms.DecimalField(
        label="CPU (cores)",
        min_value=Decimal("0"),
        max_value=Decimal("1024"),
        initial=Decimal("0.5"),
        widget=DECIMAL_WIDGET,
    )
    memory_gib = forms.DecimalField(
        label="Memory (GiB)",
        min_value=Decimal("0"),
        max_value=Decimal("16384"),
        initial=Decimal("1"),
        widget=DECIMAL_WIDGET,
    )
    gpus = forms.IntegerField(label="GPUs", min_value=0, max_value=16, initial=0)
    workload_class = forms.ChoiceField(
        label="kiln.dev/workload-class",
        choices=[(c, c) for c in scoring.WORKLOAD_CLASSES] + [(UNLABELLED, "(no label)")],
        initial=scoring.STANDARD,
    )

    def pod(self) -> scoring.PodRequest:
        """The PodRequest the cleaned form describes (cores, bytes, GPUs)."""
        data = self.cleaned_data
        labels = (
            {}
            if data["workload_class"] == UNLABELLED
            else {scoring.WORKLOAD_CLASS_LABEL: data["workload_class"]}
        )
        return scoring.PodRequest(
            cpu=float(data["cpu"]),
            memory=float(data["memory_gib"]) * 2**30,
            gpu=float(data["gpus"]),
            workload_class=scoring.workload_class_of(labels),
        )
