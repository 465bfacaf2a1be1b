"""Forms of the scheduler pages."""

from __future__ import annotations

from decimal import Decimal

from django import forms

from kiln.widgets import decimal_text
from scheduler import scoring

UNLABELLED = "unlabelled"


DECIMAL_WIDGET = decimal_text()


def _amount(label: str, *, most: str, initial: str) -> forms.DecimalField:
    """A request of a divisible resource, from 0 to `most`, typed as text the server checks."""
    return forms.DecimalField(
        label=label,
        min_value=Decimal("0"),
        max_value=Decimal(most),
        initial=Decimal(initial),
        widget=DECIMAL_WIDGET,
    )


class ScoreExplainForm(forms.Form):
    """A sample pod to score against the current nodes."""

    cpu = _amount("CPU (cores)", most="1024", initial="0.5")
    memory_gib = _amount("Memory (GiB)", most="16384", initial="1")
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
