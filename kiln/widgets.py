"""Form widgets shared by the apps' forms."""

from __future__ import annotations

from django import forms


def decimal_text() -> forms.TextInput:
    """A decimal typed as text, with a numeric keyboard on phones. A browser's number field
    sends nothing for what it cannot read (1e400), so the server would answer "required"
    instead of saying what is wrong with it."""
    return forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"})
