from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.services import admin_bootstrap
from apps.memory.coldstart.vectors import cold_start_vectors_stale
from apps.operators.services import ImportProblem, builtin_suite_load, builtin_suite_loaded
from apps.operators.spec import SpecError
from apps.runs.tasks import embed_cold_start_documents


class Command(BaseCommand):
    help = (
        "Migrate the database, make sure the first admin and their team exist, and store the "
        "built-in operator suite (only what changed since the last start); queue the cold-start "
        "documents for the knowledge base when they changed."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        admin = admin_bootstrap(
            username=settings.KOPE_ADMIN_USERNAME, password=settings.KOPE_ADMIN_PASSWORD
        )
        self.stdout.write(describe_admin(admin.username, admin.created, admin.password))
        if not builtin_suite_loaded():
            self.stdout.write("Loading the built-in operator suite (first start: a few seconds)…")
        try:
            suite = builtin_suite_load()
        except (SpecError, ImportProblem) as error:
            raise CommandError(f"the built-in operator suite cannot be loaded: {error}") from None
        self.stdout.write(f"Built-in suite: {suite.entries.count()} operators.")
        if cold_start_vectors_stale():  # the agent worker embeds them, not this start-up
            embed_cold_start_documents.delay()
            self.stdout.write("Cold-start documents queued for the knowledge base.")


def describe_admin(username: str, created: bool, password: str | None) -> str:
    if created and password:
        return f"Created admin user {username!r} with password {password!r}."
    if password:
        return f"Admin user {username!r}: password set from KOPE_ADMIN_PASSWORD."
    return (
        f"Admin user {username!r} exists (its password was printed when it was created; "
        f"reset it with `manage.py changepassword {username}` or KOPE_ADMIN_PASSWORD)."
    )
