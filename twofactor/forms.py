from __future__ import annotations

from django import forms


class CodeForm(forms.Form):
    """A code from the authenticator app (six digits) or a recovery code."""

    code = forms.CharField(
        max_length=40,
        label="Code",
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "text", "autofocus": True}
        ),
    )


class ConfirmForm(forms.Form):
    """Enrolment: the first code the app shows, to prove it holds the secret."""

    code = forms.CharField(
        max_length=10,
        label="Code from the app",
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}
        ),
    )
