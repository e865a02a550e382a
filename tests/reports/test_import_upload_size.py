"""A knowledge file over the import limit is refused by its size, before it is read: the page
and the API alike."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile, TemporaryUploadedFile

from apps.accounts.models import Team
from apps.accounts.roles import Role
from apps.reports.knowledge import ImportFileError
from apps.reports.models import Export
from apps.reports.services import MAX_IMPORT_BYTES, upload_bytes

OVER = MAX_IMPORT_BYTES + 1024


def test_a_file_over_the_limit_is_refused_unread() -> None:
    upload = TemporaryUploadedFile("big.json", "application/json", OVER, None)
    upload.write(b" " * OVER)
    upload.seek(0)

    with pytest.raises(ImportFileError) as refused:
        upload_bytes(upload)

    assert refused.value.message == f"the file is {OVER} bytes; at most {MAX_IMPORT_BYTES}"
    assert upload.tell() == 0  # not a byte of it read into memory
    upload.close()


@pytest.mark.parametrize("where", ["page", "api"])
def test_the_page_and_the_api_refuse_it_saying_so(team: Team, client_for, where: str) -> None:
    client = client_for(Role.REVIEWER)
    upload = SimpleUploadedFile("big.json", b" " * OVER, content_type="application/json")
    url = (f"/t/{team.slug}/reports/import/" if where == "page"
           else f"/api/teams/{team.slug}/knowledge/import")  # fmt: skip

    answer = client.post(url, {"file": upload})

    # the page shows its form again with the reason by the field, as its other refusals
    assert answer.status_code == 400, answer.content[:300]
    assert f"the file is {OVER} bytes; at most {MAX_IMPORT_BYTES}" in answer.content.decode()
    assert not Export.objects.filter(team=team, status="done").exists()
