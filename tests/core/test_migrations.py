"""Every model change has its migration. One left out (a new choice, a longer field) can pass
every test here, on tables built from the migrations, while the database differs from the
models, and the next change's `makemigrations` picks it up unseen."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command


def test_the_models_and_their_migrations_agree(db: None) -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit:
        raise AssertionError(f"models changed without a migration:\n{out.getvalue()}") from None
