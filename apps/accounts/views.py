from __future__ import annotations

from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.accounts import selectors, services
from apps.accounts.access import team_view
from apps.accounts.forms import MemberForm, TokenForm
from apps.accounts.models import Membership
from apps.accounts.roles import Permission
from apps.core.errors import DomainError


class LoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def get_success_url(self) -> str:
        """The safe `next`, unless it is the login page: a logged-in user sent there would be
        sent back again, which Django refuses with an exception (a 500)."""
        url = super().get_success_url()
        return self.get_default_redirect_url() if urlsplit(url).path == self.request.path else url


@never_cache  # a new token's secret is shown once: no browser history or cache may keep it
def tokens(request: HttpRequest) -> HttpResponse:
    issued = None
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        issued = services.api_token_create(user=request.user, **form.cleaned_data)  # type: ignore[arg-type]
        form = TokenForm()
    context = {"form": form, "tokens": selectors.tokens_for_user(request.user), "issued": issued}
    return render(request, "accounts/tokens.html", context, status=400 if form.errors else 200)


@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = services.api_token_revoke(user=request.user, token_id=token_id)  # type: ignore[arg-type]
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("tokens")


@team_view()
def members(request: HttpRequest, membership: Membership) -> HttpResponse:
    context = {
        "section": "members",
        "members": selectors.team_members(membership.team),
        "form": MemberForm(),
        "can_manage": membership.allows(Permission.MANAGE),
    }
    return render(request, "accounts/members.html", context)


@require_POST
@team_view(Permission.MANAGE)
def member_set(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            services.membership_set(team=membership.team, **form.cleaned_data)
            messages.success(
                request, f"{form.cleaned_data['username']} is now a {form.cleaned_data['role']}."
            )
        except DomainError as error:
            messages.error(request, error.message)
    else:
        messages.error(request, "Give a username and one of the roles.")
    return redirect("members", team=membership.team.slug)


@require_POST
@team_view(Permission.MANAGE)
def member_remove(request: HttpRequest, membership: Membership, username: str) -> HttpResponse:
    try:
        services.membership_remove(team=membership.team, username=username)
        messages.success(request, f"{username} removed.")
    except DomainError as error:
        messages.error(request, error.message)
    return redirect("members", team=membership.team.slug)
