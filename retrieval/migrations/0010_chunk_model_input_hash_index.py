"""The partial index on Chunk(tenant, model_input_hash) that the embedding cache's purge matches entries through.

`retrieval_chunk` holds millions of rows in production. A plain CREATE INDEX reads all of them while every write to
the table waits (ingestion stalls for the whole build); inside 0009's transaction it would also have held the ALTER
TABLE's ACCESS EXCLUSIVE lock, so every read waited too (searches and turns). So the index is built here, outside any
transaction, with CREATE INDEX CONCURRENTLY on PostgreSQL: reads and writes go on while it is built (it takes two
scans of the table instead of one). Elsewhere (SQLite, the embedded default) it is a plain CREATE INDEX.

Safe to run again: an index of the name that is valid is kept (a database that ran the first version of 0009, which
built it with the column); one left INVALID by a concurrent build that failed (a timeout, a cancelled deploy) is
dropped and built again, since PostgreSQL keeps such an index up to date but never reads it.
"""

from django.db import migrations, models

INDEX = models.Index(
    fields=["tenant", "model_input_hash"],
    name="chunk_tenant_model_input_hash",
    condition=~models.Q(model_input_hash=""),
)


def _existing(schema_editor, table: str) -> bool | None:
    """None when there is no index of the name; else whether it may be used (always, but on PostgreSQL)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            return True if INDEX.name in connection.introspection.get_constraints(cursor, table) else None
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [INDEX.name])
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def _drop_sql(schema_editor) -> str:
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    return f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(INDEX.name)}"


def index_build(apps, schema_editor) -> None:
    chunk = apps.get_model("retrieval", "Chunk")
    existing = _existing(schema_editor, chunk._meta.db_table)
    if existing:
        return
    if existing is False:
        schema_editor.execute(_drop_sql(schema_editor))
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INDEX.create_sql(chunk, schema_editor, concurrently=True))
    else:
        schema_editor.add_index(chunk, INDEX)


def index_drop(apps, schema_editor) -> None:
    schema_editor.execute(_drop_sql(schema_editor))


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("retrieval", "0009_chunk_model_input_hash"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="chunk", index=INDEX)],
            database_operations=[migrations.RunPython(index_build, index_drop)],
        ),
    ]
