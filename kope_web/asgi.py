"""ASGI entry point: HTTP through Django, websockets under /ws/ through Channels."""

from __future__ import annotations

import os
from typing import Any

from daphne.http_protocol import WebRequest
from django.core.asgi import get_asgi_application


def bodies_left_to_django(request_class: type[WebRequest]) -> None:
    """Daphne's requests are twisted.web's, which parse a POSTed form or multipart body
    themselves (Daphne never reads what they find) before Django does: a second copy of every
    upload in memory, and a multipart body they cannot parse answered with an empty 400
    instead of the API's JSON reason. Twisted's own switch turns that off."""
    parent_init = request_class.__init__

    def init_without_form_parsing(self: WebRequest, *args: Any, **kwargs: Any) -> None:
        parent_init(self, *args, **{**kwargs, "parsePOSTFormSubmission": False})

    request_class.__init__ = init_without_form_parsing


bodies_left_to_django(WebRequest)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kope_web.settings.local")
# Django must be set up before the consumers (and their models) are imported.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.workbench.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
