"""Reads that every API request or turn makes, written once per process and database instead of being compiled by
the queryset machinery on every call.

A `RowRead` is the SELECT of one model's row by equality on some of its fields, joined with the rows its non-null
foreign keys point to (as `select_related` joins them). Its statement is built from the models' own fields, its
values pass through the converters the ORM applies (the database backend's and each field's: SQLite's datetimes,
JSON), and they become instances as the ORM makes them (`Model.from_db`), with each related instance cached on the
row's as `select_related` caches it. So the caller gets what the equivalent
`Model.objects.filter(...).select_related(...).first()` would give, for the price of one statement's execution.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, ForeignKey, Model
from django.db.models.expressions import Col


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
        foreign_key = model._meta.get_field(name)
        if not isinstance(foreign_key, ForeignKey) or foreign_key.null:
            raise ValueError(f"{model.__name__}.{name} is not a non-null foreign key: an inner join would drop rows")
        target = foreign_key.related_model
        table = f"t{number}"
        columns += [(table, field) for field in target._meta.concrete_fields]
        parts.append((target, tuple(field.attname for field in target._meta.concrete_fields)))
        joins.append(
            f" JOIN {quote(target._meta.db_table)} {table} "
            f"ON {table}.{quote(foreign_key.target_field.column)} = t0.{quote(foreign_key.column)}"
        )
        joined.append(foreign_key)
    converters = []
    for index, (table, field) in enumerate(columns):
        column = field.get_col(table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if found:
            converters.append((index, column, tuple(found)))
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
        converters=tuple(converters),
        compared=tuple(compared),
        bounds=bounds,
    )


def row_get(*, model: type[Model], related: tuple[str, ...] = (), equal: dict[str, object]) -> Model | None:
    """The first row of `model` whose fields equal `equal` (names as `row_read` takes them), with the rows of
    `related` cached on it, or None. Meant for lookups that match one row at most (a primary or unique key). An
    integer no row's column can hold matches nothing, as the ORM's lookups say, without a query."""
    alias = router.db_for_read(model)
    read = row_read(alias, model, related, tuple(equal))
    connection = connections[alias]
    # Each value as the ORM's lookup prepares it (a primary key given as a string becomes its integer).
    parameters = [
        field.get_db_prep_value(field.get_prep_value(value), connection, prepared=True)
        for field, value in zip(read.compared, equal.values(), strict=True)
    ]
    for value, bound in zip(parameters, read.bounds, strict=True):
        if bound is not None and not _within(value, bound):
            return None
    with connection.cursor() as cursor:
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
    connection = connections[alias]
    values = list(row)
    for index, column, converters in read.converters:
        for converter in converters:
            values[index] = converter(values[index], column, connection)
    instances, start = [], 0
    for part_model, attnames in read.parts:
        instances.append(part_model.from_db(alias, list(attnames), values[start : start + len(attnames)]))
        start += len(attnames)
    first = instances[0]
    for foreign_key, related_instance in zip(read.joined, instances[1:], strict=True):
        foreign_key.set_cached_value(first, related_instance)
    return first
