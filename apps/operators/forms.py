from __future__ import annotations

from django import forms

from apps.core.kernel_input import MAX_SOURCE_BYTES, pasted_or_uploaded
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
        max_length=500, required=False, help_text="A folder on this server, under the import roots."
    )
    archive = forms.FileField(
        required=False, label="or upload an archive",
        help_text="A .zip, .tar.gz or .tgz of such a folder.",
    )  # fmt: skip
    format = forms.ChoiceField(
        choices=[("", "detect from the layout"), *((f, f) for f in FORMATS)], required=False
    )
    scale = forms.FloatField(
        initial=1.0, min_value=0.000001, max_value=1.0,
        help_text="Multiplies KernelBench size constants of 9 and up (they are GPU-scale).",
    )  # fmt: skip

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        path, archive = data.get("path"), data.get("archive")
        if "path" in data and not path and not archive:
            self.add_error("path", "Name a folder on this server or upload an archive.")
        elif path and archive:
            self.add_error("archive", "Name a folder or upload an archive, not both.")
        return data


class VersionEditForm(forms.Form):
    # The version the page showed: an edit of an older one is refused, not saved over the newest.
    based_on = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    name = forms.CharField(max_length=200)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}))
    max_abs = forms.FloatField(min_value=1e-12, label="max abs error")
    max_rel = forms.FloatField(min_value=1e-12, label="max rel error")


class KernelEvaluateForm(forms.Form):
    """A member's own kernel for the operator page's version: pasted or uploaded."""

    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    source = forms.CharField(
        required=False, strip=False, label="Paste a kernel",
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "kernel-input"}),
    )  # fmt: skip
    upload = forms.FileField(
        required=False, label="or upload a file",
        help_text=f"C source, UTF-8, at most {MAX_SOURCE_BYTES:,} bytes.",
    )  # fmt: skip

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        try:
            data["kernel"] = pasted_or_uploaded(data.get("source") or "", data.get("upload"))
        except forms.ValidationError as error:
            self.add_error("upload" if data.get("upload") else "source", error)
            return data
        if not data["kernel"]:
            self.add_error("source", "Paste a kernel or choose a file to upload.")
        return data

    @property
    def kernel_name(self) -> str:
        upload = self.cleaned_data.get("upload")
        return upload.name if upload is not None and upload.name else "pasted"
