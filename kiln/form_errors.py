"""Forms that name every problem in one round: Django's parsing and the service's rules together.

A Django form stops at the fields it cannot parse; the service's rules (which the services
own, so the forms do not repeat them) then never run on the others, and a person fixes a
form in rounds. These two functions let a view run the service's field checks on whatever
Django accepted, and show each field's problem once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django import forms
from django.forms.utils import pretty_name


def values_for_service(form: forms.Form) -> dict[str, Any]:
    """Each field's value as the service should check it: the cleaned value where Django
    accepted the field, the raw text where it refused it.

    The raw text tells the service a value was given (so a rule across fields, such as
    "set max_pods or max_percent", does not misread a refused value as a missing one); the
    service's own complaint about that field is dropped by `add_service_errors`.
    """
    form.is_valid()  # cleans once; later calls reuse the result
    cleaned = getattr(form, "cleaned_data", {})
    return {
        name: cleaned[name] if name in cleaned else form.data.get(form.add_prefix(name))
        for name in form.fields
    }


def add_service_errors(
    form: forms.Form,
    errors: Mapping[str, str | Iterable[str]],
    *,
    field_of: Callable[[str], str] = lambda key: key,
) -> None:
    """Add a service's field errors to `form`, except on fields Django already refused
    (their problem is said once); keys that name no field of the form go to the top."""
    refused = set(form.errors)
    for key, messages in errors.items():
        name = field_of(key)
        field = name if name in form.fields else None
        if field is not None and field in refused:
            continue
        for message in [messages] if isinstance(messages, str) else messages:
            form.add_error(field, in_form_words(form, message))


def in_form_words(form: forms.Form, message: str) -> str:
    """`message` with each field it names as the API does (`duration_seconds`) named as the
    form labels it ("Duration seconds"): a person reads the page's words, not the API's."""

    def label(match: re.Match[str]) -> str:
        field = form.fields.get(match[0])
        if field is None:
            return match[0]
        return str(field.label) if field.label else pretty_name(match[0])

    return SNAKE_NAME.sub(label, message)


# A name with an underscore: only such names are replaced, never a plain word ("name").
SNAKE_NAME = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def field_problems(bound: forms.Form) -> str:
    """What is wrong with each field, by its label (`Reason: Ensure this value has at most 500
    characters (it has 3000).`)."""

    def label(name: str) -> str:
        if name not in bound.fields:  # the form's own (non-field) errors
            return ""
        words = str(bound.fields[name].label or name.replace("_", " "))
        # The first letter up, the rest as written ("CPU (cores)"); a label key stays as it is.
        return words if "/" in words else words[:1].upper() + words[1:]

    return " ".join(
        f"{label(name)}: {' '.join(errors)}" if label(name) else " ".join(errors)
        for name, errors in bound.errors.items()
    )
