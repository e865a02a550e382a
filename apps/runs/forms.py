from __future__ import annotations

from django import forms

from apps.memory.values import MemoryMode

MEMORY_MODES = [
    (MemoryMode.READ_WRITE.value, "read-write: retrieve and learn"),
    (MemoryMode.READ_ONLY.value, "read-only: retrieve, write nothing"),
    (MemoryMode.OFF.value, "off"),
]


class LaunchForm(forms.Form):
    operators = forms.MultipleChoiceField(required=False, help_text="Or pick a suite.")
    suite = forms.ChoiceField(required=False)
    policy = forms.ChoiceField(
        choices=[("offline", "offline search (no model)"), ("claude", "Claude")]
    )
    model = forms.CharField(max_length=100, required=False, help_text="Claude only.")
    memory_mode = forms.ChoiceField(choices=MEMORY_MODES)
    rounds = forms.IntegerField(min_value=1, max_value=1000, initial=30,
                                help_text="Per operator, repair and optimization.")  # fmt: skip
    plateau = forms.IntegerField(min_value=1, max_value=1000, initial=10)
    repeats = forms.IntegerField(min_value=3, max_value=100_000, initial=100,
                                 help_text="Timed calls per evaluation.")  # fmt: skip
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0)
    label = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: object, operators: list[str], suites: list[str],
                 **kwargs: object) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["operators"].choices = [(slug, slug) for slug in operators]  # type: ignore[attr-defined]
        self.fields["suite"].choices = [("", "none"), *((s, s) for s in suites)]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        if "operators" not in data or "suite" not in data:
            return data  # an unknown choice has its own error; "pick one" would mislead
        if bool(data.get("operators")) == bool(data.get("suite")):
            raise forms.ValidationError("Pick operators or a suite (one of the two).")
        return data
