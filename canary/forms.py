"""Rollout forms: start a rollout, steer a held one. The services validate; these only parse."""

from __future__ import annotations

from typing import Any

from django import forms

from canary.models import Service
from canary.sequential import AnalysisConfig
from canary.services.validation import MAX_EXTENSION_TICKS
from kiln.form_errors import values_for_service

DEFAULTS = AnalysisConfig()


class RolloutStartForm(forms.Form):
    """Service, versions, steps and the analysis settings a rollout starts with."""

    service = forms.ModelChoiceField(queryset=Service.objects.none(), empty_label=None)
    baseline_version = forms.CharField(max_length=63, initial="v1")
    canary_version = forms.CharField(max_length=63, initial="v2")
    steps = forms.CharField(
        initial="5, 25, 50, 100", help_text="canary weights in percent, increasing, ending at 100"
    )
    ticks_per_step = forms.IntegerField(
        min_value=1,
        max_value=1000,
        initial=8,
        help_text="how many ticks the canary holds each step's weight before the next step; "
        "a tick is one analysis of the canary against the baseline (requests, errors, latency)",
    )
    tick_seconds = forms.FloatField(
        min_value=0.2,
        max_value=3600,
        initial=60.0,
        label="Tick length (s)",
        help_text="seconds between two analyses: each tick compares the metrics the canary "
        "and the baseline served in that window; a step lasts ticks per step × this",
    )
    alpha = forms.FloatField(
        initial=DEFAULTS.alpha, label="α (false rollback)", help_text="error SPRT, in [1e-12, 0.5)"
    )
    beta = forms.FloatField(
        initial=DEFAULTS.beta,
        label="β (promote a regression)",
        help_text="per channel, in [1e-12, 0.5)",
    )
    error_ratio = forms.FloatField(initial=DEFAULTS.error_ratio, help_text="errors ×, above 1")
    median_ratio = forms.FloatField(initial=DEFAULTS.median_ratio, help_text="above 1")
    tail_ratio = forms.FloatField(initial=DEFAULTS.tail_ratio, help_text="above 1")
    max_ticks = forms.IntegerField(
        required=False,
        min_value=1,
        label="Max duration (ticks)",
        help_text="empty: 3× the planned steps; undecided by then: inconclusive",
    )

    def __init__(self, *args: Any, services=None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if services is not None:
            self.fields["service"].queryset = services

    def clean_steps(self) -> list[int]:
        try:
            return [int(part) for part in self.cleaned_data["steps"].replace(",", " ").split()]
        except ValueError as exc:
            raise forms.ValidationError("whole numbers separated by commas") from exc

    def rollout_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `services.rollout_create` (only settings that differ from the defaults).

        A field Django refused keeps its raw text, for the service to check the others
        around it (`kiln.form_errors`); a refused analysis setting is left out of `config`,
        so it does not hide the next one's problem.
        """
        d = values_for_service(self)
        cleaned = self.cleaned_data
        config = {
            k: cleaned[k]
            for k in ("alpha", "beta", "error_ratio", "median_ratio", "tail_ratio")
            if cleaned.get(k) is not None and cleaned[k] != getattr(DEFAULTS, k)
        }
        if cleaned.get("max_ticks"):
            config["max_ticks"] = cleaned["max_ticks"]
        return {
            "service": d["service"],
            "baseline_version": d["baseline_version"],
            "canary_version": d["canary_version"],
            "steps": d["steps"],
            "ticks_per_step": d["ticks_per_step"],
            "tick_seconds": d["tick_seconds"],
            "config": config,
        }


class RolloutActionForm(forms.Form):
    """A person's decision on a rollout: which, why, and (extend) how many more ticks."""

    ACTIONS = ("promote", "abort", "retry", "extend")

    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    ticks = forms.IntegerField(required=False, min_value=1, max_value=MAX_EXTENSION_TICKS)
