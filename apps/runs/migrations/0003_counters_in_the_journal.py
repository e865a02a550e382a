"""A session's journal counters live on its journal row (memory 0007 copied them there)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0002_session_state"),
        ("memory", "0007_journal"),
    ]

    operations = [
        migrations.RemoveField(
            model_name="optimizationsession",
            name="last_seq",
        ),
        migrations.RemoveField(
            model_name="optimizationsession",
            name="tokens_used",
        ),
    ]
