"""The journal's events, the cases and the memory vectors point at the journal (issue 50), not
at `runs`' session: the same `session_id` column and values, only the constraint changes (DDL;
the append-only trigger refuses UPDATE of journal rows, and none is updated)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0007_journal"),
    ]

    operations = [
        migrations.AlterField(
            model_name="case",
            name="session",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="cases",
                to="memory.journal",
            ),
        ),
        migrations.AlterField(
            model_name="journalevent",
            name="session",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="events",
                to="memory.journal",
            ),
        ),
        migrations.AlterField(
            model_name="memoryvector",
            name="session",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                to="memory.journal",
            ),
        ),
    ]
