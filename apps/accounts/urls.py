from __future__ import annotations

from django.urls import path

from apps.accounts import views

urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
    path("teams/<slug:team>/members/", views.members, name="members"),
    path("teams/<slug:team>/members/set/", views.member_set, name="member-set"),
    path(
        "teams/<slug:team>/members/<str:username>/remove/",
        views.member_remove,
        name="member-remove",
    ),
]
