"""Running a data migration on rows written through the models as they were before it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@contextmanager
def migrations_crossed(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> Iterator[Apps]:
    """The database migrated back to `before`, and its models as of then for the block to write rows with; once the
    block is done, migrated to `after` (the migrations under test run on those rows). Whatever happens, the database
    ends at the latest migrations again, for the tests after this one."""
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        yield executor.loader.project_state(before).apps
        MigrationExecutor(connection).migrate(after)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def migrations_latest() -> None:
    """The database migrated to the latest migrations, for a test that reads through today's models after
    `migrations_crossed` left it at an earlier state."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
