"""A service's field errors on a form read in the form's words."""

from __future__ import annotations

from django import forms

from kiln.form_errors import add_service_errors, in_form_words


class Plan(forms.Form):
    name = forms.CharField()
    duration_seconds = forms.IntegerField()
    max_duration_seconds = forms.IntegerField(label="Hard maximum (s)")
    max_pods = forms.IntegerField(label="Blast radius: max pods", required=False)


def test_field_names_read_as_their_labels_and_plain_words_stay():
    form = Plan({})
    assert in_form_words(form, "must not be shorter than duration_seconds") == (
        "must not be shorter than Duration seconds"
    )
    assert in_form_words(form, "set one (max_pods or max_percent); name it") == (
        "set one (Blast radius: max pods or max_percent); name it"
    )


def test_a_services_errors_land_on_their_fields_in_the_forms_words():
    form = Plan({"name": "x", "duration_seconds": "600", "max_duration_seconds": "300"})
    add_service_errors(
        form,
        {
            "max_duration_seconds": "must not be shorter than duration_seconds",
            "overlap": ["max_pods or max_duration_seconds"],
        },
    )
    assert form.errors["max_duration_seconds"] == ["must not be shorter than Duration seconds"]
    assert form.non_field_errors() == ["Blast radius: max pods or Hard maximum (s)"]
