from __future__ import annotations

from django import forms

from apps.accounts.roles import Role


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=[(r.value, r.value) for r in Role])
