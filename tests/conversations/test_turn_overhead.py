"""What a turn spends beside the work: the question is embedded while the database is read, a hit checks its sources
with rows read beside the embedding, and the turn's rows reach PostgreSQL in one batch after the conversation row,
the same rows as written one by one; none of it serves what a turn must not serve."""

from __future__ import annotations

import threading

import pytest
from django.db import DataError, connection
from django.test.utils import CaptureQueriesContext
from psycopg.pq import TransactionStatus

from conversations.models import ConsumedItem, Conversation, DedupEvent, Turn
from conversations.services import conversation_create, turn_ask
from conversations.turn import sources as sources_service
from conversations.turn import turn_write, turns
from conversations.turn.state import StoredAnswer
from retrieval import embeddings
from retrieval.models import Chunk, Document
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_api import ask, start

pytestmark = pytest.mark.django_db
QUESTION = "How do I reset my password?"
# The batched write is PostgreSQL's (`turn_write.writes_batched`): SQLite writes row by row.
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the explicit transaction is PostgreSQL's; SQLite writes row by row"
)


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant)


def test_the_question_is_embedded_while_the_conversation_state_is_read(api_client, kb, monkeypatch):
    """The conversation's row names the knowledge base, whose model embeds the question; the embedding then runs while
    the tenant's settings and the conversation's state are read."""
    conversation_id = start(api_client, kb)
    reading = threading.Event()
    seen_while_embedding = []
    real_embed, real_state_load = embeddings.embed_query, turns.state_load

    def embed_waiting_for_the_read(text, model=None):
        # Sequential work (embedding, then the reads) would never see the read start: this waits for it, and gives up
        # after a while so the test fails rather than hangs.
        seen_while_embedding.append(reading.wait(timeout=20))
        return real_embed(text, model)

    def state_load_noticed(**kwargs):
        reading.set()
        return real_state_load(**kwargs)

    monkeypatch.setattr(embeddings, "embed_query", embed_waiting_for_the_read)
    monkeypatch.setattr(turns, "state_load", state_load_noticed)
    assert ask(api_client, conversation_id, QUESTION)["dedup"]["action"] == "answered"
    assert seen_while_embedding == [True]


def test_a_refused_turn_does_not_wait_for_its_embedding(api_client, kb, monkeypatch):
    release, finished = threading.Event(), threading.Event()
    real_embed = embeddings.embed_query

    def embed_held(text, model=None):
        release.wait(timeout=10)
        vector = real_embed(text, model)
        finished.set()
        return vector

    monkeypatch.setattr(embeddings, "embed_query", embed_held)
    try:
        response = api_client.post("/api/v1/conversations/999999/messages/", {"question": QUESTION}, format="json")
        answered_before_the_embedding = not finished.is_set()
    finally:
        release.set()
    assert response.status_code == 404
    assert answered_before_the_embedding


def _writes(queries: list[dict]) -> list[str]:
    return [q["sql"] for q in queries if not q["sql"].startswith(("SELECT", "SAVEPOINT", "RELEASE"))]


def test_a_hit_is_written_in_the_conversation_row_and_one_batch(api_client, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, QUESTION)
    with CaptureQueriesContext(connection) as captured:
        assert ask(api_client, conversation_id, QUESTION)["dedup"]["action"] == "served_cached"
    writes = _writes(captured.captured_queries)
    if connection.vendor != "postgresql":
        pytest.skip("the batch is PostgreSQL's")
    assert len(writes) == 2, writes
    assert writes[0].startswith('UPDATE "conversations_conversation"') and "nextval" in writes[0]
    batch = writes[1]
    for table in ("conversations_turn", "conversations_consumeditem", "conversations_dedupevent"):
        assert f'INSERT INTO "{table}"' in batch


def _rows_of(conversation_id: int, tenant) -> list:
    turns_written = list(Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).order_by("number"))
    numbers = {turn.pk: turn.number for turn in turns_written}
    # Timings differ from run to run; ids are compared through the turn numbers they name.
    skipped = {"id", "tenant", "conversation", "created_at", "elapsed_ms", "ms_saved", "matched_turn", "answer_origin"}

    def fields(row, extra_skipped=()):
        return {
            f.attname: getattr(row, f.attname)
            for f in row._meta.concrete_fields
            if f.name not in skipped and f.attname not in extra_skipped
        }

    written = [
        {
            **fields(turn),
            "matched": numbers.get(turn.matched_turn_id),
            "origin": numbers.get(turn.answer_origin_id),
        }
        for turn in turns_written
    ]
    events = [
        {
            **fields(event, ("turn_id", "turn_ref", "conversation_ref", "matched_turn_id", "matched_turn_ref")),
            "turn": numbers[event.turn_id],
            "turn_ref": numbers[event.turn_ref],
            "matched": numbers.get(event.matched_turn_id),
        }
        for event in DedupEvent.objects.for_tenant(tenant).filter(conversation_id=conversation_id).order_by("turn_ref")
    ]
    consumed = sorted(
        ConsumedItem.objects.for_tenant(tenant)
        .filter(conversation_id=conversation_id)
        .values_list("kind", "item_id", "turn_number")
    )
    return [written, events, consumed]


@postgres_only
def test_the_batch_writes_the_rows_the_statement_by_statement_write_does(api_client, kb, tenant, monkeypatch):
    written = {}
    for batched in (True, False):
        monkeypatch.setattr(turn_write, "writes_batched", lambda *, connection, batched=batched: batched)
        conversation_id = start(api_client, kb)
        ids = []
        for question in (QUESTION, QUESTION, "What does the Team plan cost?", QUESTION):
            ids.append(ask(api_client, conversation_id, question)["turn_id"])
        # The ids the client was given are the rows' own.
        assert (
            list(
                Turn.objects.for_tenant(tenant)
                .filter(conversation_id=conversation_id)
                .order_by("number")
                .values_list("pk", flat=True)
            )
            == ids
        )
        written[batched] = _rows_of(conversation_id, tenant)
    assert written[True][0][1]["decision"] == "served_cached"
    assert written[True][2], "the turns consumed what they showed"
    assert written[True] == written[False]


def _stored(chunk: Chunk) -> StoredAnswer:
    return StoredAnswer(
        1, "an answer", 3, 40, 12.5, [chunk.pk], {str(chunk.pk): {"hash": chunk.content_hash, "score": 0.9}}
    )


def test_rows_read_ahead_spare_the_sources_check_its_query_only_when_they_cover_it(kb, tenant):
    first, second = Chunk.objects.for_tenant(tenant).filter(knowledge_base=kb).order_by("pk")[:2]
    covering = sources_service.stored_source_rows_read(tenant=tenant, chunk_ids={first.pk, second.pk})
    with CaptureQueriesContext(connection) as captured:
        views = sources_service.stored_sources(tenant=tenant, stored=_stored(first), read_ahead=covering)
    assert [view.chunk_id for view in views] == [first.pk] and not captured.captured_queries
    other = sources_service.stored_source_rows_read(tenant=tenant, chunk_ids={second.pk})
    with CaptureQueriesContext(connection) as captured:
        views = sources_service.stored_sources(tenant=tenant, stored=_stored(first), read_ahead=other)
    assert [view.chunk_id for view in views] == [first.pk] and len(captured.captured_queries) == 1
    # A chunk read ahead and not found (disabled, deleted) fails the check without a query of its own.
    Chunk.objects.for_tenant(tenant).filter(pk=first.pk).update(enabled=False)
    gone = sources_service.stored_source_rows_read(tenant=tenant, chunk_ids={first.pk})
    with CaptureQueriesContext(connection) as captured:
        assert sources_service.stored_sources(tenant=tenant, stored=_stored(first), read_ahead=gone) is None
    assert not captured.captured_queries


@pytest.mark.parametrize("change", ["disabled", "edited"])
def test_a_hit_whose_source_changed_before_the_turn_is_not_served(api_client, kb, tenant, change):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, QUESTION)
    cited = first["sources"][0]["chunk_id"]
    if change == "disabled":
        Chunk.objects.for_tenant(tenant).filter(pk=cited).update(enabled=False)
    else:
        Chunk.objects.for_tenant(tenant).filter(pk=cited).update(content_hash="0" * 64)
    second = ask(api_client, conversation_id, QUESTION)
    assert second["dedup"]["action"] != "served_cached", second["dedup"]


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_turn_is_written_in_two_round_trips(api_client, kb, tenant):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, QUESTION)
    with CaptureQueriesContext(connection) as captured:
        hit = ask(api_client, conversation_id, QUESTION)
    assert hit["dedup"]["action"] == "served_cached"
    writes = _writes(captured.captured_queries)
    assert len(writes) == 2, writes
    assert writes[0].startswith('BEGIN; UPDATE "conversations_conversation"') and "nextval" in writes[0]
    assert 'INSERT INTO "conversations_dedupevent"' in writes[1] and writes[1].endswith("; COMMIT")
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE
    turn = Turn.objects.for_tenant(tenant).get(pk=hit["turn_id"])
    assert (turn.number, turn.decision) == (2, "served_cached")
    assert DedupEvent.objects.for_tenant(tenant).filter(turn_ref=turn.pk).exists()
    assert ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=conversation_id, turn_number=2).exists()


def _turn_count(tenant, conversation_id: int) -> tuple[int, int]:
    return (
        Conversation.objects.for_tenant(tenant).get(pk=conversation_id).turn_count,
        Turn.objects.for_tenant(tenant).filter(conversation_id=conversation_id).count(),
    )


@postgres_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("failure", ["a statement of the batch", "the code between the round trips"])
def test_a_turn_write_that_fails_midway_leaves_nothing_and_an_idle_connection(kb, tenant, monkeypatch, failure):
    conversation = conversation_create(tenant=tenant, knowledge_base_id=kb.pk)
    turn_ask(tenant=tenant, conversation_id=conversation.pk, question=QUESTION)
    assert _turn_count(tenant, conversation.pk) == (1, 1)
    if failure == "a statement of the batch":
        real = turn_write._row_statements
        monkeypatch.setattr(turn_write, "_row_statements", lambda **kwargs: [*real(**kwargs), ("SELECT 1/0", ())])
        expected = DataError
    else:

        def broken(**kwargs):
            raise RuntimeError("no rows")

        monkeypatch.setattr(turn_write, "_turn_rows", broken)
        expected = RuntimeError
    with pytest.raises(expected):
        turn_ask(tenant=tenant, conversation_id=conversation.pk, question="How much does the Team plan cost?")
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE
    assert _turn_count(tenant, conversation.pk) == (1, 1), "the conversation row's count rolled back with the rows"
    monkeypatch.undo()
    again = turn_ask(tenant=tenant, conversation_id=conversation.pk, question="How much does the Team plan cost?")
    assert again.turn.number == 2 and _turn_count(tenant, conversation.pk) == (2, 2)


def _copies(instance, count: int, **changes) -> list:
    """Unsaved copies of a saved row, with `changes` applied (a callable gets the copy's number)."""
    copies = []
    for number in range(count):
        values = {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}
        values.update({name: change(number) if callable(change) else change for name, change in changes.items()})
        copies.append(type(instance)(**values))
    return copies


@postgres_only
def test_an_insert_kept_for_its_shape_is_the_statement_django_compiles(api_client, kb, tenant, monkeypatch):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, QUESTION)
    turn = Turn.objects.for_tenant(tenant).get(pk=first["turn_id"])
    event = DedupEvent.objects.for_tenant(tenant).get(turn_ref=turn.pk)
    consumed = ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=conversation_id).first()
    moment = turn.created_at
    monkeypatch.setattr("django.utils.timezone.now", lambda: moment)  # auto_now_add fields take the same instant
    conflicts = turn_write.CONSUMED_CONFLICTS
    shapes = {
        "turn with its id": lambda n: (_copies(turn, 1, id=10_000 + n, question=f"q{n} é", answer_partial=""), None),
        "event": lambda n: (_copies(event, 1, id=None, similarity=None if n else 0.5, reason=f"r{n}"), None),
        "consumed items": lambda n: (_copies(consumed, 2 + 3 * n, id=None, item_id=lambda k: k + n), conflicts),
    }
    compiled = []
    real_insert_query = turn_write.InsertQuery

    def counted(*args, **kwargs):
        compiled.append(args[0])
        return real_insert_query(*args, **kwargs)

    monkeypatch.setattr(turn_write, "InsertQuery", counted)
    with connection.cursor() as cursor:
        for name, rows_of in shapes.items():
            turn_write._insert_shapes.clear()
            turn_write._insert_statement(connection=connection, rows=rows_of(0)[0], update_conflicts=rows_of(0)[1])
            compiled.clear()
            rows, update_conflicts = rows_of(1)  # other values, and for the consumed items more rows
            kept = turn_write._insert_statement(connection=connection, rows=rows, update_conflicts=update_conflicts)
            assert compiled == [], f"{name}: compiled again instead of kept"
            turn_write._insert_shapes.clear()
            fresh = turn_write._insert_statement(connection=connection, rows=rows, update_conflicts=update_conflicts)
            assert cursor.cursor.mogrify(*kept) == cursor.cursor.mogrify(*fresh), name
    turn_write._insert_shapes.clear()


def test_the_source_rows_are_what_the_queryset_reads(kb, tenant, other_tenant):
    chunks = list(Chunk.objects.for_tenant(tenant).filter(knowledge_base=kb).order_by("pk")[:3])
    Chunk.objects.for_tenant(tenant).filter(pk=chunks[0].pk).update(enabled=False)
    Document.objects.for_tenant(tenant).filter(pk=chunks[1].document_id).update(external_id="doc-ext ✓")
    Chunk.objects.for_tenant(tenant).filter(pk=chunks[1].pk).update(external_id="chunk-ext")
    asked = {chunk.pk for chunk in chunks} | {2**40}
    expected = {
        row[0]: row
        for row in Chunk.objects.for_tenant(tenant)
        .filter(pk__in=asked, enabled=True)
        .values_list(*sources_service._SOURCE_COLUMNS)
    }
    with CaptureQueriesContext(connection) as captured:
        read = sources_service.stored_source_rows_read(tenant=tenant, chunk_ids=asked)
    assert len(captured.captured_queries) == 1
    assert read.rows == expected and set(read.rows) == {chunks[1].pk, chunks[2].pk}
    assert read.rows[chunks[1].pk][2:4] == ("chunk-ext", "doc-ext ✓")
    # Another tenant asking for these ids reads none of them.
    assert sources_service.stored_source_rows_read(tenant=other_tenant, chunk_ids=asked).rows == {}


@postgres_only
def test_a_batch_written_as_literals_is_what_psycopg_binds_client_side(api_client, kb, tenant):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, QUESTION)
    turn = Turn.objects.for_tenant(tenant).get(pk=first["turn_id"])
    event = DedupEvent.objects.for_tenant(tenant).get(turn_ref=turn.pk)
    consumed = list(ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=conversation_id))
    assert consumed, "the turn consumed what it showed"
    turn.pk, turn.question, turn.answer = 10**9, "50% of «é» and %s and %% stay as asked", "It's 'quoted'; done"
    event.pk, event.reason = None, "100%"
    statements = [
        ("SET LOCAL synchronous_commit TO OFF", ()),
        *turn_write._row_statements(connection=connection, turn=turn, consumed_rows=consumed, event=event),
        ("COMMIT", ()),
    ]
    joined = "; ".join(sql for sql, _ in statements)
    values = [value for _, statement_values in statements for value in statement_values]
    assert None in values and any(type(value).__name__ == "Binary" for value in values)  # NULLs, the vector
    with connection.cursor() as cursor:
        expected = cursor.cursor.mogrify(joined, values)
    assert turn_write._batch_query(connection=connection, statements=statements) == expected
    with pytest.raises(ValueError, match="placeholders"):
        turn_write._batch_query(connection=connection, statements=[("SELECT %s, %s", (1,))])
