from __future__ import annotations

from django import forms

from apps.reports.models import Export

FORMATS = [(f.value, f.label) for f in Export.Format]
KNOWLEDGE_FORMATS = [("md", "Markdown"), ("json", "JSON (importable by another team)")]


class SessionReportForm(forms.Form):
    session = forms.TypedChoiceField(coerce=int, help_text="A suite session gives a suite report.")
    format = forms.ChoiceField(choices=FORMATS)

    def __init__(self, *args: object, sessions: list[tuple[int, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["session"].choices = sessions  # type: ignore[attr-defined]


class ComparisonForm(forms.Form):
    a = forms.TypedChoiceField(coerce=int, label="Session A", help_text="For example memory off.")
    b = forms.TypedChoiceField(coerce=int, label="Session B", help_text="For example memory on.")
    format = forms.ChoiceField(choices=FORMATS)

    def __init__(self, *args: object, sessions: list[tuple[int, str]], **kwargs: object) -> None:
        # Its own ids: on the Reports page beside the session form, "id_format" would be two
        # selects' id, and the second's label would name (and focus) the first.
        kwargs.setdefault("auto_id", "comparison_%s")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["a"].choices = sessions  # type: ignore[attr-defined]
        self.fields["b"].choices = sessions  # type: ignore[attr-defined]

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if data.get("a") is not None and data.get("a") == data.get("b"):
            raise forms.ValidationError("Pick two different sessions.")
        return data


class KnowledgeExportForm(forms.Form):
    format = forms.ChoiceField(choices=KNOWLEDGE_FORMATS)

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("auto_id", "knowledge_%s")  # as ComparisonForm's
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


class KnowledgeImportForm(forms.Form):
    file = forms.FileField(help_text="A JSON knowledge-base export from another team.")
