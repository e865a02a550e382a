#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kope_web.settings.local")
    # `kill -USR1 PID`: a command that seems stuck prints where each of its threads is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from kope_web.embedded_db import EmbeddedDatabaseError

    try:
        execute_from_command_line(sys.argv)
    except (ImproperlyConfigured, EmbeddedDatabaseError) as error:
        # A configuration mistake is the user's to fix: say what, not where in our code.
        sys.stderr.write(f"Configuration error: {error}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
