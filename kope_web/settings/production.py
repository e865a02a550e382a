"""Production: HTTPS only, secrets required, static files collected."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from kope_web.env import env_bool, env_int
from kope_web.settings.base import *  # noqa: F403
from kope_web.settings.base import SECRET_KEY

DEBUG = False
if SECRET_KEY.startswith("insecure-") or len(SECRET_KEY) < 50:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) must be set to 50+ random characters "
        "in production."
    )
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
WHITENOISE_USE_FINDERS = False
