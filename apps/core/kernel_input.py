"""A kernel a person brings in a form: pasted into a text box or uploaded as a file.

The operator page's "Evaluate a kernel" form and the launch form's starting kernels read it
the same way: at most MAX_SOURCE_BYTES, UTF-8 text without NUL characters, not blank, and
either pasted or uploaded, not both. Each refusal is a form error saying what was wrong.
"""

from __future__ import annotations

from django import forms
from django.core.files.uploadedfile import UploadedFile

# The most a stored kernel source may hold (apps/devices/services.kernel_source_store).
MAX_SOURCE_BYTES = 1_000_000


def uploaded_text(upload: UploadedFile[bytes], *, limit: int = MAX_SOURCE_BYTES) -> str:
    """The file's text; a ValidationError naming the file when it is too big, not UTF-8,
    holds a NUL character or is empty."""
    name = upload.name or "the file"
    if upload.size is not None and upload.size > limit:
        raise forms.ValidationError(f"{name} is {upload.size} bytes; the limit is {limit}.")
    raw: bytes = upload.read(limit + 1)
    if len(raw) > limit:
        raise forms.ValidationError(f"{name} is over the limit of {limit} bytes.")
    try:
        text = raw.decode()
    except UnicodeDecodeError as error:
        raise forms.ValidationError(
            f"{name} is not UTF-8 text (byte {error.start} cannot be read)."
        ) from None
    if "\x00" in text:
        raise forms.ValidationError(f"{name} holds a NUL character (byte {raw.index(0)}).")
    if not text.strip():
        raise forms.ValidationError(f"{name} is empty: no kernel to read.")
    return text


def pasted_or_uploaded(pasted: str, upload: UploadedFile[bytes] | None) -> str:
    """The kernel from whichever of the two was given; "" when neither was. A ValidationError
    when both were (which one was meant is not for the server to guess). A pasted kernel's
    lines end as they did in the box: a browser sends a text box's line ends as CRLF."""
    if upload is not None and pasted.strip():
        raise forms.ValidationError("Paste a kernel or upload a file, not both.")
    if upload is not None:
        return uploaded_text(upload)
    if len(pasted.encode(errors="replace")) > MAX_SOURCE_BYTES:
        raise forms.ValidationError(f"The pasted kernel is over {MAX_SOURCE_BYTES} bytes.")
    return pasted.replace("\r\n", "\n") if pasted.strip() else ""
