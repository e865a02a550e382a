from __future__ import annotations

from django.urls import path, re_path

from apps.devices.consumers import TrialConsumer
from apps.runs.consumers import SessionEventsConsumer
from apps.workbench.consumers import NoSuchSocket, TeamEventsConsumer

websocket_urlpatterns = [
    path("ws/teams/<slug:team>/", TeamEventsConsumer.as_asgi()),
    path("ws/sessions/<int:session_id>/", SessionEventsConsumer.as_asgi()),
    path("ws/trials/<int:trial_id>/", TrialConsumer.as_asgi()),
    re_path(r"", NoSuchSocket.as_asgi()),  # last: whatever the routes above do not match
]
