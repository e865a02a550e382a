from __future__ import annotations

from django import forms

from apps.operators.importing import FORMATS
from apps.operators.spec import FAMILIES


class OperatorFilterForm(forms.Form):
    family = forms.ChoiceField(
        choices=[("", "any family"), *((f, f) for f in FAMILIES)], required=False
    )
    level = forms.TypedChoiceField(
        choices=[("", "any level"), ("1", "1 elementary"), ("2", "2 composite"),
                 ("3", "3 advanced")],
        coerce=int, required=False, empty_value=None,
    )  # fmt: skip


class ImportForm(forms.Form):
    path = forms.CharField(
        max_length=500, help_text="A folder on this server, under the import roots."
    )
    format = forms.ChoiceField(
        choices=[("", "detect from the layout"), *((f, f) for f in FORMATS)], required=False
    )
    scale = forms.FloatField(
        initial=1.0, min_value=0.000001, max_value=1.0,
        help_text="Multiplies KernelBench size constants of 9 and up (they are GPU-scale).",
    )  # fmt: skip


class VersionEditForm(forms.Form):
    # The version the page showed: an edit of an older one is refused, not saved over the newest.
    based_on = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    name = forms.CharField(max_length=200)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}))
    max_abs = forms.FloatField(min_value=1e-12, label="max abs error")
    max_rel = forms.FloatField(min_value=1e-12, label="max rel error")
