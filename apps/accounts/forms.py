from __future__ import annotations

from django import forms

from apps.accounts.models import ApiToken
from apps.accounts.roles import Role


class TokenForm(forms.Form):
    EXPIRY_CHOICES = [("", "never"), ("7", "in 7 days"), ("30", "in 30 days"),
                      ("90", "in 90 days"), ("365", "in a year")]  # fmt: skip

    name = forms.CharField(max_length=100, strip=True)
    expires_in_days = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False
    )
    scope = forms.TypedChoiceField(
        choices=ApiToken.Scope.choices, empty_value=ApiToken.Scope.READ_WRITE, required=False
    )


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=[(r.value, r.value) for r in Role])
