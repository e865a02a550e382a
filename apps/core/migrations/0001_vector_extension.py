from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    """pgvector: embeddings for retrieval live in the same database as everything else."""

    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [VectorExtension()]
