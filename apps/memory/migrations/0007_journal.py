"""The journal's own row (issue 50): a session's id, team, target and memory mode, and the
counters appending moves (`last_seq`, `tokens_used`), taken from each session as it stands.
The foreign keys move onto it in 0008, in a transaction of their own: PostgreSQL refuses to
add a constraint referencing a table with rows inserted (and their checks pending) in the same
transaction."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def journals_from_sessions(apps: Any, schema_editor: Any) -> None:
    sessions = apps.get_model("runs", "OptimizationSession").objects.order_by("pk")
    journal = apps.get_model("memory", "Journal")
    journal.objects.bulk_create(
        (
            journal(id=s.pk, team_id=s.team_id, target=s.target, memory_mode=s.memory_mode,
                    last_seq=s.last_seq, tokens_used=s.tokens_used)
            for s in sessions.iterator()
        ),
        batch_size=1000,
    )  # fmt: skip


def counters_to_sessions(apps: Any, schema_editor: Any) -> None:
    sessions = apps.get_model("runs", "OptimizationSession").objects
    for j in apps.get_model("memory", "Journal").objects.iterator():
        sessions.filter(pk=j.pk).update(last_seq=j.last_seq, tokens_used=j.tokens_used)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_token_expiry_and_scope"),
        ("memory", "0006_hotmemorychange"),
        ("runs", "0002_session_state"),  # the sessions' counters, still there
    ]

    operations = [
        migrations.CreateModel(
            name="Journal",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("target", models.CharField(max_length=32)),
                ("memory_mode", models.CharField(max_length=12)),
                ("last_seq", models.PositiveBigIntegerField(default=0)),
                ("tokens_used", models.PositiveBigIntegerField(default=0)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.team",
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.RunPython(journals_from_sessions, counters_to_sessions),
    ]
