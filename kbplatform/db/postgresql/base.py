"""Django's PostgreSQL backend, with a health check of a kept connection that costs no round trip when the server has
said nothing.

With CONN_HEALTH_CHECKS, Django checks a kept connection before the first query of every request by sending
`SELECT 1`: one round trip to the database on every API call, before any of the request's own work. A server that
ends a connection (a restart, a crash, an administrator's `pg_terminate_backend`, an idle timeout) tells the client
so: it sends an error message and closes its end, so the socket becomes readable. A connection whose socket has
nothing to read has had nothing happen to it that `SELECT 1` would find, except a network that silently drops
packets, where `SELECT 1` would block as long as the request's own first query does. So the check here looks at the
socket first (`poll` with a zero timeout: no I/O): nothing to read passes it; anything to read (the server's last
words, an end of file, or a notice a client is not waiting for) falls back to Django's `SELECT 1`, which replaces
the connection when it fails. A broken or closed psycopg connection is replaced without asking the server.

Its validation (`manage.py check --database default`, and every `migrate`) warns when the server's autovacuum (or
the `track_counts` it needs) is off: the planner then never learns how the platform's tables grew
(`DatabaseValidation`).

Its `prepared_cursor` gives the platform's hot reads statements the server plans once per connection.
"""

from __future__ import annotations

import select

from django.core import checks
from django.db import DatabaseError
from django.db.backends.base.validation import BaseDatabaseValidation
from django.db.backends.postgresql import base
from django.utils.asyncio import async_unsafe

AUTOVACUUM_OFF = "kbplatform.W001"


def connection_quiet(fileno: int) -> bool:
    """Whether the socket `fileno` has nothing to read now (checked without waiting and without reading)."""
    poller = select.poll()
    poller.register(fileno, select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
    return not poller.poll(0)


def planner_statistics_problem(cursor: object) -> str:
    """What keeps the server from refreshing the planner's statistics by itself ("" when nothing does): autovacuum
    or the `track_counts` it needs turned off. The turn reads chunks and turns by id within a tenant; with
    statistics from when the tables were small (or none), the planner can take the tenant's index for selective and
    scan all of it, so every such read grows with the tenant's data instead of staying an index lookup
    (docs/operations.md, "Planner statistics"). One query on `cursor`."""
    cursor.execute("SELECT current_setting('autovacuum'), current_setting('track_counts')")
    autovacuum, track_counts = cursor.fetchone()
    if autovacuum == "on" and track_counts == "on":
        return ""
    return (
        f"autovacuum={autovacuum}, track_counts={track_counts}: nothing refreshes the planner's statistics as chunks "
        "and turns accumulate, and a turn's reads by id can become scans of a tenant's whole index"
    )


class DatabaseValidation(BaseDatabaseValidation):
    def check(self, **kwargs: object) -> list[checks.CheckMessage]:
        """A warning when the server does not keep the planner's statistics fresh (`planner_statistics_problem`).
        A server that cannot be asked is left to the health check."""
        try:
            with self.connection.cursor() as cursor:
                problem = planner_statistics_problem(cursor)
        except DatabaseError:
            return []
        if not problem:
            return []
        return [
            checks.Warning(
                f"PostgreSQL does not keep the planner's statistics fresh on database {self.connection.alias!r} "
                f"({problem}).",
                hint="Turn autovacuum (and track_counts) on in postgresql.conf, or run ANALYZE after every bulk load "
                'and on a schedule: docs/operations.md, "Planner statistics".',
                id=AUTOVACUUM_OFF,
            )
        ]


class DatabaseWrapper(base.DatabaseWrapper):
    validation_class = DatabaseValidation

    @async_unsafe
    def prepared_cursor(self) -> object:
        """A cursor whose statements psycopg prepares on this connection once each has run `prepare_threshold`
        times on it (OPTIONS; DATABASE_PREPARE_THRESHOLD): from then on the server runs a stored plan instead of
        parsing and planning the statement again. For the fixed reads every request makes (`kbplatform.row_reads`),
        whose parameters the server binds. Django's own cursors bind on the client (nothing they send is ever
        prepared), so only what asks for this cursor is. With preparing turned off it is Django's cursor."""
        if self.settings_dict["OPTIONS"].get("prepare_threshold") is None:
            return self.cursor()
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            return self._prepare_cursor(base.ServerBindingCursor(self.connection))

    def close_if_health_check_failed(self) -> None:
        if self.pool or self.connection is None or not self.health_check_enabled or self.health_check_done:
            return super().close_if_health_check_failed()
        if self.connection.closed or self.connection.broken:
            self.close()
            self.health_check_done = True
            return
        try:
            quiet = connection_quiet(self.connection.fileno())
        except (OSError, ValueError):
            quiet = False
        if quiet:
            self.health_check_done = True
            return
        super().close_if_health_check_failed()
