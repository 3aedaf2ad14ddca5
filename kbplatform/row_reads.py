"""Reads that every API request or turn makes, written once per process and database instead of being compiled by
the queryset machinery on every call.

A `RowRead` is the SELECT of one model's row by equality on some of its fields, joined with the rows its non-null
foreign keys point to (as `select_related` joins them). Its statement is built from the models' own fields, its
values pass through the converters the ORM applies (the database backend's and each field's: SQLite's datetimes,
JSON), and they become instances as the ORM makes them (`Model.from_db`), with each related instance cached on the
row's as `select_related` caches it. So the caller gets what the equivalent
`Model.objects.filter(...).select_related(...).first()` would give, for the price of one statement's execution; on
PostgreSQL a statement the server has prepared on the connection (`_read_cursor`), so it is not planned again on every
request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, ForeignKey, Model
from django.db.models.expressions import Col
from psycopg.types.numeric import Int8


@dataclass(frozen=True)
class RowRead:
    sql: str
    # Per model in the row, in column order: the model and the attribute names of its columns.
    parts: tuple[tuple[type[Model], tuple[str, ...]], ...]
    # The foreign keys joined, in `parts[1:]` order: each related instance is cached on the first part's.
    joined: tuple[ForeignKey, ...]
    # (position in the row, the column's expression, its converters) for the columns that have any.
    converters: tuple[tuple[int, Col, tuple[Callable, ...]], ...]
    # Per equality condition: its field, and the (lowest, highest) value its integer column holds (None for others).
    compared: tuple[Field, ...]
    bounds: tuple[tuple[int | None, int | None] | None, ...]


@functools.cache
def row_read(alias: str, model: type[Model], related: tuple[str, ...], equal: tuple[str, ...]) -> RowRead:
    """The statement reading `model`'s rows whose fields `equal` ("pk" for the primary key) equal the parameters,
    in that order, joined with the rows of its non-null foreign keys `related`, on database `alias`."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    columns = [("t0", field) for field in model._meta.concrete_fields]
    parts = [(model, tuple(field.attname for field in model._meta.concrete_fields))]
    joins, joined = [], []
    for number, name in enumerate(related, start=1):
        foreign_key = _joinable(model, name)
        target, table = foreign_key.related_model, f"t{number}"
        columns += [(table, field) for field in target._meta.concrete_fields]
        parts.append((target, tuple(field.attname for field in target._meta.concrete_fields)))
        joins.append(_join_sql(quote, foreign_key, table))
        joined.append(foreign_key)
    compared = [model._meta.pk if name == "pk" else model._meta.get_field(name) for name in equal]
    conditions = " AND ".join(f"t0.{quote(field.column)} = %s" for field in compared)
    bounds = tuple(_integer_bounds(connection, field) for field in compared)
    sql = (
        f"SELECT {', '.join(f'{table}.{quote(field.column)}' for table, field in columns)} "
        f"FROM {quote(model._meta.db_table)} t0{''.join(joins)} WHERE {conditions}"
    )
    return RowRead(
        sql=sql,
        parts=tuple(parts),
        joined=tuple(joined),
        converters=_converters_of(connection, columns),
        compared=tuple(compared),
        bounds=bounds,
    )


def row_get(
    *, model: type[Model], tenant_id: int, related: tuple[str, ...] = (), equal: dict[str, object]
) -> Model | None:
    """The first row of tenant `tenant_id`'s rows of `model` whose fields equal `equal` (names as `row_read` takes
    them), with the rows of `related` cached on it, or None. The tenant is the first condition of the WHERE clause, so
    no caller can forget it; `model` must have a `tenant` field. Meant for lookups that match one row at most (a
    primary or unique key). An integer no row's column can hold matches nothing, as the ORM's lookups say, without a
    query."""
    return _row_get(model=model, related=related, equal=_tenant_first(tenant_id, equal))


def row_get_unscoped(*, model: type[Model], related: tuple[str, ...] = (), equal: dict[str, object]) -> Model | None:
    """`row_get` without a tenant, for the one read that finds the tenant rather than being given it (an API key by
    its prefix). Named so that it is easy to find in review, like a manager's `.unscoped()`."""
    return _row_get(model=model, related=related, equal=equal)


def _tenant_first(tenant_id: int, equal: dict[str, object]) -> dict[str, object]:
    if tenant_id is None:
        raise ValueError("a tenant-scoped read needs the tenant")
    if "tenant" in equal or "tenant_id" in equal:
        raise ValueError("the tenant is given as tenant_id=, not among the other conditions")
    return {"tenant": tenant_id, **equal}


def _row_get(*, model: type[Model], related: tuple[str, ...], equal: dict[str, object]) -> Model | None:
    alias = router.db_for_read(model)
    read = row_read(alias, model, related, tuple(equal))
    connection = connections[alias]
    parameters = _prepared(connection, read.compared, equal.values())
    for value, bound in zip(parameters, read.bounds, strict=True):
        if bound is not None and not _within(value, bound):
            return None
    with _read_cursor(connection) as cursor:
        cursor.execute(read.sql, parameters)
        row = cursor.fetchone()
    if row is None:
        return None
    return _instances(read=read, alias=alias, row=row)


def _integer_bounds(connection: BaseDatabaseWrapper, field: Field) -> tuple[int | None, int | None] | None:
    """The values an integer column (a foreign key's: its target's) can hold on `connection`, else None."""
    internal_type = (field.target_field if field.is_relation else field).get_internal_type()
    if not internal_type.endswith(("IntegerField", "AutoField")):
        return None
    return connection.ops.integer_field_range(internal_type)


def _within(value: int, bound: tuple[int | None, int | None]) -> bool:
    lowest, highest = bound
    return (lowest is None or value >= lowest) and (highest is None or value <= highest)


def _instances(*, read: RowRead, alias: str, row: Sequence) -> Model:
    values = _converted(connections[alias], read.converters, row)
    instances, start = [], 0
    for part_model, attnames in read.parts:
        instances.append(part_model.from_db(alias, list(attnames), values[start : start + len(attnames)]))
        start += len(attnames)
    first = instances[0]
    for foreign_key, related_instance in zip(read.joined, instances[1:], strict=True):
        foreign_key.set_cached_value(first, related_instance)
    return first


@dataclass(frozen=True)
class ValuesRead:
    # The statement, with "{keys}" where the primary key's condition goes.
    sql: str
    # On PostgreSQL the keys are one array parameter (`= ANY`); elsewhere one placeholder each (`IN`).
    keys_as_array: bool
    converters: tuple[tuple[int, Col, tuple[Callable, ...]], ...]
    compared: tuple[Field, ...]


@functools.cache
def values_read(
    alias: str, model: type[Model], columns: tuple[str, ...], equal: tuple[str, ...], true: tuple[str, ...]
) -> ValuesRead:
    """The statement reading `columns` (as `values_list` names them: a field, "pk", or "relation__field" through a
    non-null foreign key) of `model`'s rows whose primary key is among the keys, whose fields `equal` equal the
    parameters and whose boolean fields `true` are true, on database `alias`."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    meta = model._meta
    tables: dict[str, tuple[str, ForeignKey]] = {}
    selected = []
    for name in columns:
        relation, _, field_name = name.rpartition("__")
        if not relation:
            selected.append(("t0", meta.pk if name == "pk" else meta.get_field(name)))
            continue
        table, foreign_key = tables.setdefault(relation, (f"t{len(tables) + 1}", _joinable(model, relation)))
        target = foreign_key.related_model._meta
        selected.append((table, target.pk if field_name == "pk" else target.get_field(field_name)))
    joins = "".join(_join_sql(quote, foreign_key, table) for table, foreign_key in tables.values())
    compared = tuple(meta.get_field(name) for name in equal)
    conditions = [f"t0.{quote(field.column)} = %s" for field in compared]
    conditions += [f"t0.{quote(meta.get_field(name).column)}" for name in true]
    keys_as_array = connection.vendor == "postgresql"
    conditions.append(f"t0.{quote(meta.pk.column)} " + ("= ANY(%s)" if keys_as_array else "IN ({keys})"))
    sql = (
        f"SELECT {', '.join(f'{table}.{quote(field.column)}' for table, field in selected)} "
        f"FROM {quote(meta.db_table)} t0{joins} WHERE {' AND '.join(conditions)}"
    )
    return ValuesRead(
        sql=sql, keys_as_array=keys_as_array, converters=_converters_of(connection, selected), compared=compared
    )


def values_by_keys(
    *,
    model: type[Model],
    columns: tuple[str, ...],
    keys: Collection[int],
    tenant_id: int,
    equal: dict[str, object] | None = None,
    true: tuple[str, ...] = (),
) -> list[tuple]:
    """`model.objects.filter(pk__in=keys, tenant=tenant_id, **equal, **{name: True for name in true})
    .values_list(*columns)` in one statement written once per process (`values_read`), its values converted as the
    ORM converts them; the tenant is the first condition of the WHERE clause (`model` must have a `tenant` field). No
    query for no keys."""
    equal = _tenant_first(tenant_id, equal or {})
    if not keys:
        return []
    alias = router.db_for_read(model)
    read = values_read(alias, model, columns, tuple(equal), true)
    connection = connections[alias]
    parameters = _prepared(connection, read.compared, equal.values())
    keys = [int(key) for key in keys]
    if read.keys_as_array:
        # Always an array of bigint, whatever the ids' size: psycopg types a list by its largest value, and a
        # statement is prepared per parameter types, so ids of varying size would each wait their own turns.
        sql, parameters = read.sql, [*parameters, [Int8(key) for key in keys]]
    else:
        sql, parameters = read.sql.replace("{keys}", ", ".join(["%s"] * len(keys))), [*parameters, *keys]
    with _read_cursor(connection) as cursor:
        cursor.execute(sql, parameters)
        rows = cursor.fetchall()
    return [tuple(_converted(connection, read.converters, row)) for row in rows]


def _read_cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """The cursor a read runs on: on PostgreSQL one whose statements are prepared once they recur on the connection
    (`kbplatform.db.postgresql`'s `prepared_cursor`), as these reads do on every request; elsewhere Django's."""
    prepared = getattr(connection, "prepared_cursor", None)
    return prepared() if prepared is not None else connection.cursor()


def _joinable(model: type[Model], name: str) -> ForeignKey:
    """`model`'s foreign key `name`, which must be non-null: an inner join would drop the rows without one."""
    foreign_key = model._meta.get_field(name)
    if not isinstance(foreign_key, ForeignKey) or foreign_key.null:
        raise ValueError(f"{model.__name__}.{name} is not a non-null foreign key: an inner join would drop rows")
    return foreign_key


def _join_sql(quote: Callable[[str], str], foreign_key: ForeignKey, table: str) -> str:
    """The JOIN of `foreign_key`'s target table as `table` onto the read's own row (`t0`)."""
    target = foreign_key.related_model._meta
    return (
        f" JOIN {quote(target.db_table)} {table} "
        f"ON {table}.{quote(foreign_key.target_field.column)} = t0.{quote(foreign_key.column)}"
    )


def _converters_of(
    connection: BaseDatabaseWrapper, columns: Sequence[tuple[str, Field]]
) -> tuple[tuple[int, Col, tuple[Callable, ...]], ...]:
    """(position, column expression, converters) of each selected (table, field) that the ORM converts on
    `connection`: the backend's converters, then the field's."""
    found = []
    for index, (table, field) in enumerate(columns):
        column = field.get_col(table)
        converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if converters:
            found.append((index, column, tuple(converters)))
    return tuple(found)


def _converted(connection: BaseDatabaseWrapper, converters: Sequence[tuple], row: Sequence) -> list:
    values = list(row)
    for index, column, column_converters in converters:
        for converter in column_converters:
            values[index] = converter(values[index], column, connection)
    return values


def _prepared(connection: BaseDatabaseWrapper, fields: Sequence[Field], values: Iterable[object]) -> list:
    """Each value as the ORM's lookup prepares it for `connection` (a primary key given as a string becomes its
    integer)."""
    return [
        field.get_db_prep_value(field.get_prep_value(value), connection, prepared=True)
        for field, value in zip(fields, values, strict=True)
    ]
