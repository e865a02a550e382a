from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from apps.accounts.services import admin_bootstrap


class Command(BaseCommand):
    help = "Migrate the database and make sure the first admin and their team exist."

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        admin = admin_bootstrap(
            username=settings.KOPE_ADMIN_USERNAME, password=settings.KOPE_ADMIN_PASSWORD
        )
        self.stdout.write(describe_admin(admin.username, admin.created, admin.password))


def describe_admin(username: str, created: bool, password: str | None) -> str:
    if created and password:
        return f"Created admin user {username!r} with password {password!r}."
    if password:
        return f"Admin user {username!r}: password set from KOPE_ADMIN_PASSWORD."
    return (
        f"Admin user {username!r} exists (its password was printed when it was created; "
        f"reset it with `manage.py changepassword {username}` or KOPE_ADMIN_PASSWORD)."
    )
