"""The partial index on Chunk(tenant, model_input_hash) that the embedding cache's purge matches entries through.

`retrieval_chunk` holds millions of rows in production, so the index is built without stopping writes (CREATE INDEX
CONCURRENTLY on PostgreSQL, see kbplatform/migration_indexes.py); inside 0009's transaction it would also have held
the ALTER TABLE's ACCESS EXCLUSIVE lock, so every read waited too (searches and turns). Safe to run again, including
on a database that ran the first version of 0009, which built it with the column.
"""

from django.db import migrations, models

from kbplatform.migration_indexes import index_add_concurrently


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("retrieval", "0009_chunk_model_input_hash"),
    ]

    operations = [
        index_add_concurrently(
            app_label="retrieval",
            model_name="chunk",
            index=models.Index(
                fields=["tenant", "model_input_hash"],
                name="chunk_tenant_model_input_hash",
                condition=~models.Q(model_input_hash=""),
            ),
        ),
    ]
