from __future__ import annotations

from typing import Any

from django import forms

from apps.core.kernel_input import pasted_or_uploaded
from apps.memory.values import MemoryMode
from apps.runs.services import MAX_UPLOAD_CHARS

MEMORY_MODES = [
    (MemoryMode.READ_WRITE.value, "read-write: retrieve and learn"),
    (MemoryMode.READ_ONLY.value, "read-only: retrieve, write nothing"),
    (MemoryMode.OFF.value, "off"),
]
# Starting kernels the form takes, each for one chosen operator; the API takes any number.
STARTING_KERNEL_ROWS = 3
KERNEL_FIELDS = ("kernel_operator", "kernel_source", "kernel_file")


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
        for row in range(STARTING_KERNEL_ROWS):
            self.fields.update(starting_kernel_fields(row, operators))

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        data["starting_kernels"] = self.starting_kernels(data)
        if "operators" not in data or "suite" not in data:
            return data  # an unknown choice has its own error; "pick one" would mislead
        if bool(data.get("operators")) == bool(data.get("suite")):
            raise forms.ValidationError("Pick operators or a suite (one of the two).")
        return data

    def starting_kernels(self, data: dict[str, Any]) -> dict[str, str]:
        """Operator slug -> kernel, from the rows that name both; a row's fault is its error."""
        kernels: dict[str, str] = {}
        chosen = data.get("operators") or []
        for row in range(STARTING_KERNEL_ROWS):
            operator, source, upload = (data.get(f"{name}_{row}") for name in KERNEL_FIELDS)
            try:
                kernel = pasted_or_uploaded(source or "", upload)
            except forms.ValidationError as error:
                self.add_error(f"kernel_{'file' if upload else 'source'}_{row}", error)
                continue
            if kernel and not operator:
                self.add_error(f"kernel_operator_{row}", "Pick the operator this kernel starts.")
            elif operator and not kernel:
                self.add_error(f"kernel_source_{row}", f"Paste or upload a kernel for {operator}, "
                               "or set its operator back to none.")  # fmt: skip
            elif operator and chosen and operator not in chosen:
                self.add_error(f"kernel_operator_{row}",
                               f"{operator} is not among the operators picked above.")  # fmt: skip
            elif operator in kernels:
                self.add_error(f"kernel_operator_{row}", f"{operator} has a kernel above already.")
            elif operator:
                kernels[operator] = kernel
        return kernels

    def launch_fields(self) -> list[forms.BoundField]:
        return [field for field in self if not field.name.startswith("kernel_")]

    def kernel_rows(self) -> list[list[forms.BoundField]]:
        return [[self[f"{name}_{row}"] for name in KERNEL_FIELDS]
                for row in range(STARTING_KERNEL_ROWS)]  # fmt: skip

    @staticmethod
    def estimate_excludes() -> str:
        """The fields the size estimate does without: a kernel is no part of it, and a pasted
        one would not fit in its URL."""
        return ",".join(f"{name}_{row}" for row in range(STARTING_KERNEL_ROWS)
                        for name in KERNEL_FIELDS[1:])  # fmt: skip


def starting_kernel_fields(row: int, operators: list[str]) -> dict[str, forms.Field]:
    number = row + 1
    return {
        f"kernel_operator_{row}": forms.ChoiceField(
            required=False, label=f"Starting kernel {number}: operator",
            choices=[("", "none"), *((slug, slug) for slug in operators)],
        ),
        f"kernel_source_{row}": forms.CharField(
            required=False, strip=False, label=f"Starting kernel {number}: paste it",
            widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false",
                                         "class": "kernel-input"}),
        ),
        f"kernel_file_{row}": forms.FileField(
            required=False, label=f"Starting kernel {number}: or upload it",
            help_text=f"UTF-8 C source, at most {MAX_UPLOAD_CHARS:,} characters.",
        ),
    }  # fmt: skip
