"""Django code run in a process of its own, so that the settings read its environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT


def django_script(script: str, env: dict[str, str], *, dropped: str, waiting: str,
                  timeout: float) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run `script` under the local settings with this environment (less the variables whose
    names start with `dropped`) plus `env`; one still running after `timeout` seconds fails
    the test saying it was still `waiting`."""
    process_env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    process_env.update(DJANGO_SETTINGS_MODULE="kope_web.settings.local", **env)
    try:
        return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=process_env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{waiting} was still waiting at {timeout:.0f} s")
