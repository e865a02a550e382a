from __future__ import annotations

from django.urls import path

from apps.workbench.consumers import TeamEventsConsumer

websocket_urlpatterns = [
    path("ws/teams/<slug:team>/", TeamEventsConsumer.as_asgi()),
]
