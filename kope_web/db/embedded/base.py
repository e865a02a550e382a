"""Django's PostgreSQL backend, pointed at the embedded server, which it starts on demand."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from kope_web import embedded_db


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        self.settings_dict["HOST"] = embedded_db.socket_dir(
            self.settings_dict["DATA_DIR"], self.settings_dict["SERVER_DATABASE"]
        )
        return super().get_connection_params()
