"""A turn's one transaction (the QA pair, consumed items, audit event, the conversation row) and what follows its
commit (the hot copy in Redis, the question index)."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import BinaryField, Field, Model
from django.db.models.constants import OnConflict
from django.db.models.sql import InsertQuery
from django.utils import timezone
from psycopg.adapt import Transformer
from psycopg.pq import TransactionStatus

from conversations.dedup import decisions
from conversations.models import (
    AnswerState,
    ConsumedItem,
    Conversation,
    DedupAction,
    DedupEvent,
    DedupScope,
    Turn,
)
from conversations.turn.candidates import epoch_seconds
from conversations.turn.sources import SourceView
from conversations.turn.state import (
    ConversationState,
    RecentTurn,
    StoredAnswer,
    decided_question,
    state_after_turn,
    state_forget,
    state_store_behind,
    turn_cites,
    vector_to_bytes,
)
from kbplatform.errors import NotFoundError
from kbplatform.jobs import task_enqueue_on_commit
from retrieval import question_index, vectorstore
from retrieval.metadata import metadata_filter_key
from tenants.models import Tenant

logger = logging.getLogger(__name__)


def _turn_number_take(
    *,
    tenant: Tenant,
    conversation: Conversation,
    now: datetime,
    expires_at: datetime,
    allocate_turn_id: bool,
    begin: bool = False,
) -> tuple[int, int | None]:
    """Inside the turn's transaction: count the turn on the conversation row, move its expiry, and return the new
    turn's number, with the new turn's id taken from its table's sequence when `allocate_turn_id` (PostgreSQL), so
    the rows that name the turn can be written without reading its id back. The UPDATE locks the row until the
    transaction ends, so concurrent turns of one conversation queue here and get distinct numbers. It also forgets the
    chat client's transcript (`transcripts.transcript_record` writes the new one once a chat turn's answer is sent):
    a transcript that does not hold this turn is no longer the conversation's latest state. RETURNING makes it
    one round trip (PostgreSQL, and SQLite 3.35+), where the ORM would need a locking read and a write. A sequence
    value taken by a turn that then rolls back is a gap in the ids, as any failed insert leaves. `begin` opens the
    transaction in the same round trip (an explicit BEGIN before the UPDATE, for `_turn_write_explicit`)."""
    connection = transaction.get_connection()
    table = connection.ops.quote_name(Conversation._meta.db_table)
    moments = [connection.ops.adapt_datetimefield_value(moment) for moment in (now, expires_at)]
    returning = "turn_count, nextval(pg_get_serial_sequence(%s, %s))" if allocate_turn_id else "turn_count"
    with connection.cursor() as cursor:
        cursor.execute(
            ("BEGIN; " if begin else "")
            + f"UPDATE {table} SET turn_count = turn_count + 1, last_active_at = %s, expires_at = %s, "
            "transcript_digest = '' "
            f"WHERE id = %s AND tenant_id = %s RETURNING {returning}",
            [*moments, conversation.pk, tenant.pk]
            + ([Turn._meta.db_table, Turn._meta.pk.column] if allocate_turn_id else []),
        )
        if begin:
            cursor.nextset()  # past BEGIN's result to the UPDATE's
        row = cursor.fetchone()
    if row is None:
        raise NotFoundError("Conversation not found.")
    return int(row[0]), (int(row[1]) if allocate_turn_id else None)


def writes_batched(*, connection: BaseDatabaseWrapper) -> bool:
    """Whether a turn's rows go to the database as one batch of statements: on PostgreSQL, where every statement
    is a round trip to another process; SQLite runs in the process and gains nothing from it."""
    return connection.vendor == "postgresql"


def _insert_statement(
    *, connection: BaseDatabaseWrapper, rows: list[Model], update_conflicts: dict[str, list[str]] | None = None
) -> tuple[str, tuple]:
    """The INSERT of `rows` (of one model) as `bulk_create` writes it (the same fields, defaults, `auto_now_add`
    values and conversions; ON CONFLICT DO UPDATE for `update_conflicts`: its `unique_fields` and `update_fields`),
    as SQL and parameters, without RETURNING: the caller sends it with the transaction's other statements in one
    round trip. A row whose primary key is set is written with it.

    Every turn writes the same few shapes of INSERT, so the SQL of a shape is what Django's compiler wrote for it
    the first time, kept per process (`_InsertShape`); the parameters are the compiler's own per row (each field's
    `pre_save` then `get_db_prep_save`). A shape whose SQL could depend on the values (a field with its own
    placeholder, several rows Django would not send as arrays) or a value that is an expression is compiled whole
    every time."""
    meta = rows[0]._meta
    with_pk = rows[0].pk is not None
    conflicts = (
        (tuple(update_conflicts["unique_fields"]), tuple(update_conflicts["update_fields"]))
        if update_conflicts
        else None
    )
    shape = _insert_shapes.get((connection.alias, meta.label, with_pk, len(rows) > 1, conflicts))
    if shape is not None:
        parameters = shape.parameters(connection=connection, rows=rows)
        if parameters is not None:
            return shape.sql, parameters
    fields = [field for field in meta.concrete_fields if not field.generated and (with_pk or field is not meta.pk)]
    query = InsertQuery(
        type(rows[0]),
        on_conflict=OnConflict.UPDATE if update_conflicts else None,
        update_fields=[meta.get_field(name) for name in update_conflicts["update_fields"]]
        if update_conflicts
        else None,
        unique_fields=[meta.get_field(name) for name in update_conflicts["unique_fields"]]
        if update_conflicts
        else None,
    )
    query.insert_values(fields, rows)
    [(statement, parameters)] = query.get_compiler(connection=connection).as_sql()
    if shape is None and _shape_keeps(connection=connection, fields=fields, rows=rows, statement=statement):
        _insert_shapes[(connection.alias, meta.label, with_pk, len(rows) > 1, conflicts)] = _InsertShape(
            sql=statement, fields=fields, arrays=len(rows) > 1
        )
    return statement, tuple(parameters)


@dataclass(frozen=True)
class _InsertShape:
    """An INSERT's SQL for one model, primary key or not, one row or several, one conflict rule; and its fields in
    the SQL's order. `arrays`: several rows, sent as one array per column (PostgreSQL's UNNEST form)."""

    sql: str
    fields: list[Field]
    arrays: bool

    def parameters(self, *, connection: BaseDatabaseWrapper, rows: list[Model]) -> tuple | None:
        """The statement's parameters for `rows`, as Django's compiler makes them; None if a value is an expression
        (its SQL is its own)."""
        value_rows = []
        for row in rows:
            values = []
            for field in self.fields:
                value = field.pre_save(row, add=True)
                if hasattr(value, "resolve_expression"):
                    return None
                values.append(field.get_db_prep_save(value, connection=connection))
            value_rows.append(values)
        if self.arrays:
            return tuple(list(column) for column in zip(*value_rows, strict=True))
        return tuple(value_rows[0])


_insert_shapes: dict[tuple, _InsertShape] = {}


def _shape_keeps(*, connection: BaseDatabaseWrapper, fields: list[Field], rows: list[Model], statement: str) -> bool:
    """Whether the SQL Django wrote for `rows` serves every other set of rows of that shape: no field makes its own
    placeholder (it may depend on the value; a binary field's is "%s" whatever the value where the backend keeps
    Django's default, as PostgreSQL does), no value is an expression, and several rows went as arrays (UNNEST, whose
    SQL does not grow with the rows) rather than one VALUES group each."""
    plain_binary = type(connection.ops).binary_placeholder_sql is BaseDatabaseOperations.binary_placeholder_sql
    if any(
        hasattr(field, "get_placeholder") and not (plain_binary and isinstance(field, BinaryField)) for field in fields
    ):
        return False
    if any(hasattr(getattr(row, field.attname), "resolve_expression") for row in rows for field in fields):
        return False
    return len(rows) == 1 or " UNNEST(" in statement


@dataclass(frozen=True)
class TurnRecord:
    """Everything a turn stores: the QA pair, the consumed items (from `sources`) and the audit event (`event`, the
    DedupEvent's own fields). Typed, so a field misnamed or missing fails where the turn is built, not in the write."""

    tenant: Tenant
    conversation: Conversation
    ttl_seconds: int
    question: str
    question_vector: np.ndarray
    question_vector_model: str
    partial_index: bool
    intent: str
    mode: str
    answer: str
    answer_tokens: int
    sources: list[SourceView]
    source_chunks: dict
    context_tokens: int
    action: str
    decision: decisions.DuplicateDecision
    matched: StoredAnswer | None
    elapsed_ms: float
    event: dict
    answer_state: str = AnswerState.COMPLETE
    answer_partial: str = ""
    answer_error: str = ""
    rewritten_question: str = ""
    # False: the answer cites none of `sources` (`answering.answer_cites`). They were shown, so they are consumed, but
    # the QA pair cites nothing and is never served to a duplicate (`MatchRefusal.NO_SOURCE`).
    answer_cites: bool = True
    curated_answer_id: int | None = None


def turn_persist(record: TurnRecord) -> Turn:
    """Write the turn (`_turn_write`). A turn that names another turn (the pair it matched or served, or a close
    match it refused) can lose a race with the purge: the other turn's conversation expires and is deleted between
    the decision and this commit, and the deferred foreign-key check fails at COMMIT. The answer is still right (it
    was read while the pair existed), so the write is redone once with the vanished references left empty (the
    audit event keeps their numbers in its `_ref` columns); the common path pays no extra query."""
    decision, matched = record.decision, record.matched
    referenced = {pk for pk in (decision.turn_id, matched.turn_id if matched else None) if pk is not None}
    curated = record.curated_answer_id is not None or record.event.get("curated_answer_id") is not None
    try:
        return _turn_write(record)
    except IntegrityError:
        if not referenced and not curated:
            raise
        logger.info("turn write lost a race with a delete (turns %s); writing it again", sorted(referenced))
    if curated:
        # The curated answer was deleted meanwhile: the answer read while it existed still goes out; the event keeps
        # its number in `curated_answer_ref`.
        record = replace(record, curated_answer_id=None, event={**record.event, "curated_answer_id": None})
    return _turn_write(record, recheck_references=referenced or None)


def _turn_write(record: TurnRecord, *, recheck_references: set[int] | None = None) -> Turn:
    """One transaction: lock the conversation row (so concurrent turns queue here and get distinct numbers), write
    the QA pair, mark what it showed as consumed by this turn, move the expiry, write the audit event.
    `recheck_references`: turns this one names that may have been deleted since the decision; those still there are
    locked against deletion until the commit, the others are not named.

    On PostgreSQL, outside any transaction the caller holds (a request or a task), the transaction is two round
    trips (`_turn_write_explicit`). Inside one (a test's, a caller's atomic block), or for `recheck_references`
    (a locking read the ORM does), it is Django's atomic block: a savepoint or BEGIN, the conversation row, the QA
    pair, consumed items and audit event as one batch, the release or COMMIT. Elsewhere (SQLite, in process) the rows
    are written one statement after another."""
    tenant, conversation, decision, action = record.tenant, record.conversation, record.decision, record.action
    sources = record.sources
    now = timezone.now()
    turn_fields = {
        "tenant": tenant,
        "conversation": conversation,
        "knowledge_base_id": conversation.knowledge_base_id,
        "user_id": conversation.user_id,
        "question": record.question,
        "question_vector": vector_to_bytes(record.question_vector),
        "question_vector_model": record.question_vector_model,
        "partial_index": record.partial_index,
        "metadata_filter_key": metadata_filter_key(conversation.metadata_filter),
        "intent": record.intent,
        "mode": record.mode,
        "answer": record.answer,
        "answer_tokens": record.answer_tokens,
        "answer_state": record.answer_state,
        "answer_partial": record.answer_partial,
        "answer_error": record.answer_error[:300],
        "rewritten_question": record.rewritten_question,
        "source_chunks": record.source_chunks if record.answer_cites else {},
        "source_chunk_ids": [s.chunk_id for s in sources] if record.answer_cites else [],
        "context_tokens": record.context_tokens,
        "decision": action,
        "similarity": decision.similarity,
        "elapsed_ms": record.elapsed_ms,
        "curated_answer_id": record.curated_answer_id,
    }
    rows = functools.partial(
        _turn_rows,
        turn_fields=turn_fields,
        sources=sources,
        action=action,
        decision=decision,
        matched=record.matched,
        event=record.event,
        rewritten_question=record.rewritten_question,
    )
    number_take = functools.partial(
        _turn_number_take,
        tenant=tenant,
        conversation=conversation,
        now=now,
        expires_at=now + timedelta(seconds=record.ttl_seconds),
    )
    connection = transaction.get_connection()
    batched = writes_batched(connection=connection)
    # A cache hit may commit without waiting for the WAL flush (settings.ASYNC_COMMIT_CACHED_TURNS says what that
    # risks); other databases are left as configured.
    commit_without_flush = batched and action == DedupAction.SERVED_CACHED and settings.ASYNC_COMMIT_CACHED_TURNS
    if batched and not recheck_references and connection.get_autocommit() and not connection.in_atomic_block:
        return _turn_write_explicit(
            connection=connection, number_take=number_take, rows=rows, commit_without_flush=commit_without_flush
        )
    with transaction.atomic():
        number, turn_id = number_take(allocate_turn_id=batched)
        present = None
        if recheck_references:
            present = set(
                Turn.objects.for_tenant(tenant)
                .select_for_update(no_key=True)
                .filter(pk__in=recheck_references)
                .values_list("pk", flat=True)
            )
        turn, consumed, consumed_rows, event_row = rows(number=number, turn_id=turn_id, present=present)
        if batched:
            statements = [("SET LOCAL synchronous_commit TO OFF", ())] if commit_without_flush else []
            statements += _row_statements(
                connection=connection, turn=turn, consumed_rows=consumed_rows, event=event_row
            )
            _statements_send(connection=connection, statements=statements)
            _saved(connection, turn, event_row)
        else:
            turn.save(force_insert=True)
            event_row.turn_ref = turn.pk  # the id the INSERT just gave it
            if consumed_rows:
                ConsumedItem.objects.bulk_create(consumed_rows, update_conflicts=True, **CONSUMED_CONFLICTS)
            event_row.save(force_insert=True)
    turn.consumed_refs = consumed
    return turn


# An item shown again is consumed as of the newest turn that showed it.
CONSUMED_CONFLICTS = {"unique_fields": ["conversation", "kind", "item_id"], "update_fields": ["turn_number"]}


def _turn_write_explicit(
    *,
    connection: BaseDatabaseWrapper,
    number_take: Callable[..., tuple[int, int | None]],
    rows: Callable[..., tuple[Turn, list[decisions.ConsumedRef], list[ConsumedItem], DedupEvent]],
    commit_without_flush: bool,
) -> Turn:
    """The turn's transaction on PostgreSQL in two round trips, where Django's atomic block takes four: BEGIN with
    the conversation row's UPDATE, then the rows' INSERTs with COMMIT, each sent as one simple query. The commit is as
    durable as Django's (the server's synchronous_commit, unless `commit_without_flush`). A statement that fails
    skips the rest of its query, COMMIT included; anything raised before the transaction ends rolls it back, so the
    connection is left idle either way. A COMMIT that fails (a deferred foreign key: the purge race of
    `turn_persist`) is an IntegrityError as under the ORM."""
    try:
        number, turn_id = number_take(allocate_turn_id=True, begin=True)
        turn, consumed, consumed_rows, event = rows(number=number, turn_id=turn_id, present=None)
        statements = [("SET LOCAL synchronous_commit TO OFF", ())] if commit_without_flush else []
        statements += _row_statements(connection=connection, turn=turn, consumed_rows=consumed_rows, event=event)
        statements.append(("COMMIT", ()))
        _statements_send(connection=connection, statements=statements)
    except BaseException:
        _rollback_if_open(connection)
        raise
    _saved(connection, turn, event)
    turn.consumed_refs = consumed
    return turn


def _rollback_if_open(connection: BaseDatabaseWrapper) -> None:
    """End a transaction `_turn_write_explicit` opened and did not close; a connection that is gone is left to
    Django, which discards it at the end of the request."""
    raw = connection.connection
    if raw is None or raw.closed or raw.info.transaction_status == TransactionStatus.IDLE:
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK")
    except DatabaseError:
        logger.warning("could not roll back a failed turn write; the connection is discarded")
        connection.close()


def _turn_rows(
    *,
    turn_fields: dict[str, Any],
    sources: list[SourceView],
    action: str,
    decision: decisions.DuplicateDecision,
    matched: StoredAnswer | None,
    event: dict,
    rewritten_question: str,
    number: int,
    turn_id: int | None,
    present: set[int] | None,
) -> tuple[Turn, list[decisions.ConsumedRef], list[ConsumedItem], DedupEvent]:
    """The turn's rows once its number (and id, when taken from the sequence) is known: the turn, its consumed refs
    and rows, its audit event. `present`: of the turns it names, those still there (None: all)."""

    def still_there(pk: int | None) -> int | None:
        return pk if present is None or pk in present else None

    tenant, conversation = turn_fields["tenant"], turn_fields["conversation"]
    turn = Turn(
        pk=turn_id,
        number=number,
        matched_turn_id=still_there(decision.turn_id) if decision.hit and matched is not None else None,
        answer_origin_id=still_there(matched.turn_id) if action == DedupAction.SERVED_CACHED else None,
        **turn_fields,
    )
    consumed = _consumed_of(sources=sources, turn_number=number)
    consumed_rows = [
        ConsumedItem(tenant=tenant, conversation=conversation, kind=c.kind, item_id=c.item_id, turn_number=number)
        for c in consumed
    ]
    event_row = DedupEvent(
        tenant=tenant,
        conversation=conversation,
        conversation_ref=conversation.pk,
        turn=turn,
        turn_ref=turn.pk,
        similarity=decision.similarity,
        matched_turn_id=still_there(decision.turn_id),
        matched_turn_ref=decision.turn_id,
        pair_probability=decision.probability,
        match_passes_checks=decision.passes_checks,
        # Version rows are never deleted but with their tenant, so the ids the decision named are still there.
        verifier_id=decision.verifier_version_id,
        verifier_label=decision.verifier_label or decisions.SHIPPED_VERIFIER_LABEL,
        shadow_verifier_id=decision.shadow.verifier_version_id if decision.shadow else None,
        shadow_verifier_hit=decision.shadow.hit if decision.shadow else None,
        shadow_verifier_probability=decision.shadow.probability if decision.shadow else None,
        shadow_verifier_passes_checks=decision.shadow.passes_checks if decision.shadow else None,
        rewritten_question=rewritten_question,
        **event,
    )
    return turn, consumed, consumed_rows, event_row


def _row_statements(
    *, connection: BaseDatabaseWrapper, turn: Turn, consumed_rows: list[ConsumedItem], event: DedupEvent
) -> list[tuple[str, tuple]]:
    statements = [_insert_statement(connection=connection, rows=[turn])]
    if consumed_rows:
        statements.append(
            _insert_statement(connection=connection, rows=consumed_rows, update_conflicts=CONSUMED_CONFLICTS)
        )
    statements.append(_insert_statement(connection=connection, rows=[event]))
    return statements


def _statements_send(*, connection: BaseDatabaseWrapper, statements: list[tuple[str, tuple]]) -> None:
    """Send `statements` as one simple query (`_batch_query`): one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(_batch_query(connection=connection, statements=statements))


def _batch_query(*, connection: BaseDatabaseWrapper, statements: list[tuple[str, tuple]]) -> str:
    """`statements` as one query, their values written into it as literals by psycopg's own adaptation, as Django's
    client-side binding writes them, into the batch's SQL split at its placeholders once per process
    (`_batch_parts`): psycopg splits a query of more than 4 KB or 50 parameters, as a turn's batch is, again on
    every call. Text, as every query Django's execute wrappers see is."""
    encoding = connection.connection.info.encoding
    parts = _batch_parts("; ".join(sql for sql, _ in statements), encoding)
    values = [value for _, statement_values in statements for value in statement_values]
    if len(values) != len(parts) - 1:
        raise ValueError(f"{len(values)} values for a batch of {len(parts) - 1} placeholders")
    adapt = Transformer.from_context(connection.connection).as_literal
    pieces = [parts[0]]
    for value, part in zip(values, parts[1:], strict=True):
        pieces += [adapt(value) if value is not None else b"NULL", part]
    return b"".join(pieces).decode(encoding)


@functools.lru_cache(maxsize=64)
def _batch_parts(sql: str, encoding: str) -> tuple[bytes, ...]:
    """`sql`'s text between its "%s" placeholders, "%%" read as "%", encoded: what psycopg's client-side binding
    splits a query into."""
    parts, text = [], []
    for token in re.split(r"(%%|%s)", sql):
        if token == "%s":
            parts.append("".join(text))
            text = []
        else:
            text.append("%" if token == "%%" else token)
    parts.append("".join(text))
    return tuple(part.encode(encoding) for part in parts)


def _saved(connection: BaseDatabaseWrapper, *instances: Model) -> None:
    """Mark rows written by statements of our own as the ORM marks rows it saved."""
    for instance in instances:
        instance._state.adding, instance._state.db = False, connection.alias


def _consumed_of(*, sources: list[SourceView], turn_number: int) -> list[decisions.ConsumedRef]:
    """Both granularities are recorded, so a policy change between doc and chunk applies to past turns too."""
    refs: dict[tuple[str, int], decisions.ConsumedRef] = {}
    for source in sources:
        refs[("doc", source.document_id)] = decisions.ConsumedRef("doc", source.document_id, turn_number)
        refs[("chunk", source.chunk_id)] = decisions.ConsumedRef("chunk", source.chunk_id, turn_number)
    return list(refs.values())


def turn_after_commit(
    *,
    tenant: Tenant,
    conversation: Conversation,
    state: ConversationState,
    turn: Turn,
    policy: decisions.PolicyView,
    question_vector: np.ndarray,
) -> None:
    """Refresh the hot copy, written behind the answer (`state.state_store_behind`), or drop it when another turn
    came in between (the next read rebuilds it); and index the question for tenant-scope dedup. Neither may fail
    the turn: the rows are already committed."""
    if turn.number == state.turn_count + 1:
        new_state = state_after_turn(
            state=state,
            turn=RecentTurn(
                turn.pk,
                turn.number,
                decided_question(turn),
                question_vector,
                bool(turn.answer),
                StoredAnswer.of_turn(turn) if turn.answer else None,
                turn.question_vector_model,
                turn.partial_index,
                turn_cites(turn),
            ),
            consumed=turn.consumed_refs,
        )
        state_store_behind(tenant_id=tenant.pk, state=new_state, ttl_seconds=policy.ttl_seconds)
    else:
        state_forget(tenant_id=tenant.pk, conversation_id=conversation.pk)
    # A pair answered from a partial index is never served: in the tenant-scope index it would only take the place of
    # a candidate that can be (the search keeps the nearest TENANT_SCOPE_CANDIDATES).
    if policy.scope == DedupScope.TENANT and not turn.partial_index:
        try:
            question_index.question_vectors_upsert(
                rows=[
                    question_index.QuestionVector(
                        turn_id=turn.pk,
                        tenant_id=tenant.pk,
                        knowledge_base_id=conversation.knowledge_base_id,
                        created_ts=epoch_seconds(turn.created_at),
                        vector=question_vector,
                        metadata_filter_key=turn.metadata_filter_key,
                    )
                ],
                model=turn.question_vector_model,
            )
        except vectorstore.VectorStoreUnavailable:
            # The turn is committed; its question is indexed by a worker once Milvus answers again, so it is not
            # missing from tenant-scope dedup for good.
            logger.warning("question index unavailable: turn %s queued for indexing by a worker", turn.pk)
            task_enqueue_on_commit("conversations.question_index_backfill", tenant.pk, turn_ids=[turn.pk])
