"""The single-machine channel layer: channels_postgres over the project's own database."""

from __future__ import annotations

from typing import Any

from channels_postgres.core import PostgresChannelLayer
from django.conf import settings

from kope_web import embedded_db


def database_params() -> dict[str, Any]:
    params = dict(settings.DATABASES["default"])
    if "DATA_DIR" in params:
        params["HOST"] = embedded_db.socket_dir(params["DATA_DIR"], params["SERVER_DATABASE"])
        params["ENGINE"] = "django.db.backends.postgresql"
    return params


class DatabaseChannelLayer(PostgresChannelLayer):  # type: ignore[misc]
    def __init__(self, **config: Any) -> None:
        super().__init__(**config, **database_params())
        # Leaving a group goes through Django's ORM under the alias "channels_postgres", which
        # this project does not define: its tables live in the default database.
        self.django_db.using = "default"
