from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.accounts.roles import Permission, Role, role_allows


class Team(models.Model):
    """A project: owns sessions, memory, rules and reports."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=[(r.value, r.value.capitalize()) for r in Role])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team"),
            models.CheckConstraint(
                condition=models.Q(role__in=[r.value for r in Role]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} as {self.role}"

    def allows(self, permission: Permission) -> bool:
        return role_allows(self.role, permission)


class TokenScope(models.TextChoices):
    READ_WRITE = "read_write", "read and write"
    READ_ONLY = "read_only", "read only"


class ApiToken(models.Model):
    """A per-user key for scripts. Only a SHA-256 of the secret is stored."""

    Scope = TokenScope
    # What a read-only token may send: reads, which change nothing.
    READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, unique=True)
    secret_hash = models.CharField(max_length=64)
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.READ_WRITE)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # null: never
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=TokenScope.values), name="api_token_scope_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    def allows_method(self, method: str) -> bool:
        return self.scope == self.Scope.READ_WRITE or method in self.READ_METHODS


class IdempotentRequest(models.Model):
    """A change sent over the API with an Idempotency-Key, and the answer its retries get."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    path = models.TextField()
    fingerprint = models.CharField(max_length=64)  # SHA-256 of the method, path and body
    claimed_at = models.DateTimeField()
    status = models.PositiveSmallIntegerField(null=True)  # null while the first one runs
    content_type = models.CharField(max_length=100, blank=True)
    body = models.BinaryField(default=b"")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_once_per_user")
        ]
        indexes = [models.Index(fields=["claimed_at"], name="idempotency_by_age")]

    def __str__(self) -> str:
        return f"{self.method} {self.path} with key {self.key!r}"
