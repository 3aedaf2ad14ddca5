"""Indexes added to large tables without stopping the platform, for migrations.

A plain CREATE INDEX reads the whole table while every write to it waits (ingestion, turns); inside a migration's
transaction it would also hold any other lock the migration took. On PostgreSQL the index is built with CREATE INDEX
CONCURRENTLY, outside any transaction (the migration says `atomic = False`): reads and writes go on while it is built,
at the price of two scans of the table. Elsewhere (SQLite, the embedded default) it is a plain CREATE INDEX.

Safe to run again: an index of the name that is valid is kept; one left INVALID by a concurrent build that failed (a
timeout, a cancelled deploy) is dropped and built again, since PostgreSQL keeps such an index up to date but never
reads it.
"""

from __future__ import annotations

from django.db import migrations, models
from django.db.migrations.operations.base import Operation


def _existing(schema_editor, table: str, name: str) -> bool | None:  # noqa: ANN001 - Django's schema editor
    """None when there is no index of the name; else whether it may be used (always, but on PostgreSQL)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            return True if name in connection.introspection.get_constraints(cursor, table) else None
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def _drop_sql(schema_editor, name: str) -> str:  # noqa: ANN001 - Django's schema editor
    concurrently = " CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
    return f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(name)}"


def index_add_concurrently(*, app_label: str, model_name: str, index: models.Index) -> Operation:
    """The operation that adds `index` to `model_name` as the module says; its migration must set `atomic = False`."""

    def build(apps, schema_editor) -> None:  # noqa: ANN001 - RunPython's arguments
        model = apps.get_model(app_label, model_name)
        existing = _existing(schema_editor, model._meta.db_table, index.name)
        if existing:
            return
        if existing is False:
            schema_editor.execute(_drop_sql(schema_editor, index.name))
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(index.create_sql(model, schema_editor, concurrently=True))
        else:
            schema_editor.add_index(model, index)

    def drop(apps, schema_editor) -> None:  # noqa: ANN001 - RunPython's arguments
        schema_editor.execute(_drop_sql(schema_editor, index.name))

    return migrations.SeparateDatabaseAndState(
        state_operations=[migrations.AddIndex(model_name=model_name, index=index)],
        database_operations=[migrations.RunPython(build, drop)],
    )
