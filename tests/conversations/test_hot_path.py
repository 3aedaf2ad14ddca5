"""The cache-hit path reads as little as it can: the tenant's settings from the process copy while they are
unchanged, the stored answer from the hot copy, and one query for the cited sources; every change to the settings
reaches the next turn; the hot copy keeps answers for the newest turns only."""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import replace

import numpy as np
import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import services
from conversations.admin import services as admin_services
from conversations.dedup.decisions import ConsumedRef
from conversations.models import Conversation, Intent, Turn
from conversations.services import dedup_policy_update, intent_set, turn_ask, turn_settings_load
from conversations.turn import state as state_module
from conversations.turn import turns
from conversations.turn.state import (
    ANSWERS_KEPT,
    ConversationState,
    RecentTurn,
    StoredAnswer,
    _decode,
    _encode,
    hot_copy_writes_wait,
    state_after_turn,
    state_forget,
    state_from_database,
    state_key,
    state_load,
    state_store,
    vector_to_bytes,
)
from kbplatform.errors import NotFoundError
from kbplatform.redis_client import redis_connection
from retrieval import milvus, question_index, vectorstore
from retrieval.embeddings import model_id
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_api import ask, start

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant)


def _tables_read(queries: list[dict]) -> list[str]:
    return [q["sql"].split(" FROM ", 1)[1].split()[0].strip('"') for q in queries if q["sql"].startswith("SELECT")]


def test_a_hit_reads_the_key_the_conversation_and_the_sources_only(api_client, kb):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    with CaptureQueriesContext(connection) as captured:
        body = ask(api_client, conversation_id, "How do I reset my password?")
    assert body["dedup"]["action"] == "served_cached"
    assert body["sources"] and body["answer"]
    tables = _tables_read(captured.captured_queries)
    assert tables == ["tenants_apikey", "conversations_conversation", "retrieval_chunk"], tables


def test_the_stored_answer_comes_from_the_row_when_the_hot_copy_does_not_keep_it(api_client, kb, tenant):
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    # A hot copy without the stored answer (an older turn's, beyond ANSWERS_KEPT): the row is read instead.
    conversation = Conversation.objects.for_tenant(tenant).get(pk=conversation_id)
    state = state_load(conversation=conversation)
    stripped = ConversationState(
        conversation_id=state.conversation_id,
        turn_count=state.turn_count,
        recent_turns=[replace(t, stored=None) for t in state.recent_turns],
        consumed=state.consumed,
    )
    assert state_store(tenant_id=tenant.pk, state=stripped, ttl_seconds=600)
    with CaptureQueriesContext(connection) as captured:
        second = ask(api_client, conversation_id, "How do I reset my password?")
    assert second["dedup"]["action"] == "served_cached"
    assert second["answer"] == first["answer"]
    assert "conversations_turn" in _tables_read(captured.captured_queries)


def test_a_policy_change_reaches_the_next_turn(api_client, kb, tenant):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    assert ask(api_client, conversation_id, "How do I reset my password?")["dedup"]["action"] == "served_cached"
    dedup_policy_update(tenant=tenant, scope="off")
    off = ask(api_client, conversation_id, "How do I reset my password?")["dedup"]
    assert off["action"] == "answered" and off["reason"] == "", off  # scope off never looks for a duplicate


def test_every_settings_write_moves_the_version(tenant, admin_user):
    def version() -> int:
        tenant.refresh_from_db(fields=["settings_version"])
        return tenant.settings_version

    steps = [
        lambda: dedup_policy_update(tenant=tenant, threshold=0.95),
        lambda: intent_set(tenant=tenant, name="pricing", examples=["how much is it"]),
        lambda: admin_services.dedup_policy_change(tenant=tenant, user=admin_user, changes={"threshold": 0.93}),
        lambda: admin_services.intent_save(
            tenant=tenant, user=admin_user, name="billing", behaviour="normal", examples=["my invoice"]
        ),
        lambda: admin_services.intent_save(
            tenant=tenant,
            user=admin_user,
            name="billing",
            behaviour="normal",
            examples=["my invoice", "the bill"],
            intent=Intent.objects.for_tenant(tenant).get(name="billing"),
        ),
        lambda: admin_services.intent_delete(
            tenant=tenant, user=admin_user, intent=Intent.objects.for_tenant(tenant).get(name="billing")
        ),
    ]
    for step in steps:
        before = version()
        step()
        assert version() > before


def test_the_process_copy_of_the_settings_follows_the_version(tenant):
    first = turn_settings_load(tenant=tenant)
    assert turn_settings_load(tenant=tenant) is first
    dedup_policy_update(tenant=tenant, threshold=0.97)
    tenant.refresh_from_db()
    changed = turn_settings_load(tenant=tenant)
    assert changed is not first
    assert changed.policy.threshold == pytest.approx(0.97)
    intent_set(tenant=tenant, name="pricing", examples=["how much is it"])
    tenant.refresh_from_db()
    assert "pricing" in [intent.name for intent in turn_settings_load(tenant=tenant).intents]


def _stored(turn_id: int) -> StoredAnswer:
    return StoredAnswer(turn_id, f"answer {turn_id}", 3, 40, 12.5, [turn_id], {str(turn_id): {"hash": "h", "score": 1}})


def test_the_hot_copy_keeps_answers_of_the_newest_turns_only():
    state = ConversationState(conversation_id=1, turn_count=0)
    for number in range(1, ANSWERS_KEPT + 6):
        turn = RecentTurn(number, number, f"q{number}", np.ones(4, dtype=np.float32), True, _stored(number))
        state = state_after_turn(state=state, turn=turn, consumed=[])
    kept = [t.turn_id for t in state.recent_turns if t.stored is not None]
    assert kept == list(range(6, ANSWERS_KEPT + 6))
    assert all(t.answerable for t in state.recent_turns)
    decoded = _decode(1, _encode(state))
    assert [t.stored for t in decoded.recent_turns] == [t.stored for t in state.recent_turns]


def test_the_hot_copy_round_trips_vectors_and_refuses_what_it_cannot_read():
    state = ConversationState(conversation_id=1, turn_count=0, revision=4)
    vectors = [np.arange(4, dtype=np.float32) + n for n in range(3)] + [np.ones(6, dtype=np.float32)]
    for number, vector in enumerate(vectors, start=1):
        turn = RecentTurn(
            number,
            number,
            f"q é {number}",
            vector,
            number % 2 == 0,
            None,
            f"model{number % 2}",
            number == 3,
            number != 2,
        )
        state = state_after_turn(state=state, turn=turn, consumed=[ConsumedRef("doc", 10 + number, number)])
    raw = _encode(state)
    decoded = _decode(1, raw)
    assert decoded.revision == 4 and decoded.turn_count == 4 and decoded.source == "redis"
    assert [t.question for t in decoded.recent_turns] == ["q é 1", "q é 2", "q é 3", "q é 4"]
    for before, after in zip(state.recent_turns, decoded.recent_turns, strict=True):
        assert after.vector.dtype == np.float32 and np.array_equal(before.vector, after.vector)
        assert after.answerable == before.answerable
        assert after.vector_model == before.vector_model
        assert after.partial_index == before.partial_index
    assert [t.partial_index for t in decoded.recent_turns] == [False, False, True, False]
    assert [t.cites for t in decoded.recent_turns] == [True, False, True, True]
    assert decoded.consumed == state.consumed
    # An older copy (JSON, state version 3), a truncated one, or one whose vectors do not add up: ValueError or
    # struct.error, which state_load answers by rebuilding from the database.
    # A copy of version 7 (no flag for an answer citing no source) is refused by its version byte.
    version_7 = b"KBS" + bytes([7]) + raw[4:]
    for unreadable in (b'{"v":3,"turn_count":4}', raw[:6], raw[:-4], version_7):
        with pytest.raises((ValueError, struct.error)):
            _decode(1, unreadable)


def test_the_state_rebuilt_from_rows_keeps_the_same_answers(api_client, kb, tenant):
    conversation_id = start(api_client, kb)
    body = ask(api_client, conversation_id, "How do I reset my password?")
    state = state_from_database(conversation=Conversation.objects.for_tenant(tenant).get(pk=conversation_id))
    turn = Turn.objects.for_tenant(tenant).get(pk=body["turn_id"])
    assert state.recent_turns[-1].stored == StoredAnswer.of_turn(turn)
    assert state.recent_turns[-1].stored.answer == body["answer"]


def test_a_cached_turn_skips_the_flush_only_when_configured_to(api_client, kb, settings):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    for asynchronous in (False, True):
        settings.ASYNC_COMMIT_CACHED_TURNS = asynchronous
        with CaptureQueriesContext(connection) as captured:
            assert ask(api_client, conversation_id, "How do I reset my password?")["dedup"]["action"] == "served_cached"
        issued = any("synchronous_commit" in q["sql"] for q in captured.captured_queries)
        assert issued == (connection.vendor == "postgresql" and asynchronous)


def test_a_turn_on_a_conversation_deleted_meanwhile_is_not_found(tenant, kb, monkeypatch):
    conversation = services.conversation_create(tenant=tenant, knowledge_base_id=kb.pk)
    real_state_load = turns.state_load

    def state_then_delete(*, conversation):
        state = real_state_load(conversation=conversation)
        Conversation.objects.for_tenant(tenant).filter(pk=conversation.pk).delete()
        return state

    monkeypatch.setattr(turns, "state_load", state_then_delete)
    with pytest.raises(NotFoundError):
        turn_ask(tenant=tenant, conversation_id=conversation.pk, question="How do I reset my password?")
    assert not Turn.objects.for_tenant(tenant).exists()


def test_switching_to_tenant_scope_indexes_the_questions_asked_before(
    api_client, kb, tenant, other_tenant, django_capture_on_commit_callbacks, monkeypatch
):
    from conversations import tasks

    # Under SQLite a rolled-back test's turn ids come back, and its question vectors stay in Milvus under them:
    # start from an empty question index for this tenant, so "not found before the backfill" means what it says.
    name = question_index.question_collection_ensure(model=model_id(), dimension=kb.embedding_dimension)
    milvus.connect().delete(collection_name=name, filter=question_index.question_filter_build(tenant_id=tenant.pk))

    first = ask(api_client, start(api_client, kb, user_id="a"), "How do I reset my password?")
    enqueued = []
    monkeypatch.setattr(tasks.question_index_backfill_task, "delay", lambda tenant_id: enqueued.append(tenant_id))
    with django_capture_on_commit_callbacks(execute=True):
        dedup_policy_update(tenant=tenant, scope="tenant")
    assert enqueued == [tenant.pk]
    with django_capture_on_commit_callbacks(execute=True):
        dedup_policy_update(tenant=tenant, threshold=0.9)  # already tenant scope: nothing more to index
    assert enqueued == [tenant.pk]

    # Before the backfill the other user's question is not found; after it, it is served.
    before = ask(api_client, start(api_client, kb, user_id="b"), "How can I reset my password?")
    assert before["dedup"]["action"] == "answered"
    assert services.question_index_backfill(tenant_id=tenant.pk) == 2
    assert services.question_index_backfill(tenant_id=tenant.pk) == 2  # an upsert: running twice adds nothing
    after = ask(api_client, start(api_client, kb, user_id="c"), "How can I reset my password?")
    assert after["dedup"]["action"] == "served_cached"
    assert after["dedup"]["matched_turn_id"] in (first["turn_id"], before["turn_id"])
    # Another tenant's backfill indexes only its own questions (none here), and a tenant off tenant scope none.
    assert services.question_index_backfill(tenant_id=other_tenant.pk) == 0


def test_a_question_milvus_refused_to_index_is_queued_and_indexed_later(
    api_client, kb, tenant, django_capture_on_commit_callbacks, monkeypatch
):
    """Milvus fails the question's upsert after the turn is committed: the turn stands, a worker is asked to index
    just that question, and once it has, another user's paraphrase is served from it."""
    from conversations import tasks

    name = question_index.question_collection_ensure(model=model_id(), dimension=kb.embedding_dimension)
    milvus.connect().delete(collection_name=name, filter=question_index.question_filter_build(tenant_id=tenant.pk))
    dedup_policy_update(tenant=tenant, scope="tenant")
    enqueued = []
    monkeypatch.setattr(
        tasks.question_index_backfill_task, "delay", lambda tenant_id, turn_ids: enqueued.append((tenant_id, turn_ids))
    )
    real_upsert = question_index.question_vectors_upsert

    def refused(**kwargs):
        raise vectorstore.VectorStoreUnavailable("Milvus timed out")

    monkeypatch.setattr(question_index, "question_vectors_upsert", refused)
    with django_capture_on_commit_callbacks(execute=True):
        first = ask(api_client, start(api_client, kb, user_id="a"), "How do I reset my password?")
    assert Turn.objects.for_tenant(tenant).filter(pk=first["turn_id"]).exists()
    assert enqueued == [(tenant.pk, [first["turn_id"]])]
    monkeypatch.setattr(question_index, "question_vectors_upsert", real_upsert)

    # Not found before the worker has run, found after; the task indexes that turn only.
    before = ask(api_client, start(api_client, kb, user_id="b"), "How can I reset my password?")
    assert before["dedup"]["action"] == "answered"
    assert services.question_index_backfill(tenant_id=tenant.pk, turn_ids=[first["turn_id"]]) == 1
    after = ask(api_client, start(api_client, kb, user_id="c"), "How can I reset my password?")
    assert after["dedup"]["action"] == "served_cached"
    assert after["dedup"]["matched_turn_id"] in (first["turn_id"], before["turn_id"])


@pytest.mark.parametrize("deleted", ["turn", "conversation's consumed item"])
def test_what_a_tenant_admin_deletes_is_no_longer_used_by_the_hot_copy(api_client, client, tenant, kb, deleted):
    """A turn deleted in the admin was still served from the conversation's hot copy in Redis (and a deleted
    consumed item still excluded): deletions now move the conversation's revision and drop the copy."""
    from django.urls import reverse

    from conversations.models import ConsumedItem
    from tenants.models import Role
    from tests.admin_ui.conftest import user_with_role

    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    client.force_login(user_with_role(tenant, Role.ADMIN, "deleter@example.com"))
    if deleted == "turn":
        url = reverse("admin:conversations_turn_delete", args=[first["turn_id"]])
    else:
        item = ConsumedItem.objects.for_tenant(tenant).filter(conversation_id=conversation_id, kind="chunk").first()
        url = reverse("admin:conversations_consumeditem_delete", args=[item.pk])
    assert b"Cannot delete" not in client.get(url).content
    assert client.post(url, {"post": "yes"}).status_code == 302

    if deleted == "turn":
        again = ask(api_client, conversation_id, "How can I reset my password?")
        assert not Turn.objects.for_tenant(tenant).filter(pk=first["turn_id"]).exists()
        assert again["dedup"]["action"] == "answered" and again["dedup"]["matched_turn_id"] is None
    else:
        assert not ConsumedItem.objects.for_tenant(tenant).filter(pk=item.pk).exists()
        state = state_load(conversation=Conversation.objects.for_tenant(tenant).get(pk=conversation_id))
        assert state.source == "database"  # the copy that still listed the item is not used
        assert ("chunk", item.item_id) not in {(ref.kind, ref.item_id) for ref in state.consumed}


def test_intent_vectors_stored_by_a_model_of_another_size_are_embedded_again(api_client, kb, tenant):
    """After a model change the intents' stored example vectors have another size: the turn embeds the examples
    again (and stores them) instead of failing in the classification with a 500."""
    for intent in Intent.objects.for_tenant(tenant):
        intent.example_vectors = vector_to_bytes(np.ones((len(intent.examples), 8), dtype=np.float32))
        intent.save()
    body = ask(api_client, start(api_client, kb), "hello")
    assert body["dedup"]["intent"] == "greeting" and body["dedup"]["action"] == "smalltalk"
    greeting = Intent.objects.for_tenant(tenant).get(name="greeting")
    assert len(greeting.example_vectors) == len(greeting.examples) * kb.embedding_dimension * 4


def _slow_hot_copy_writes(monkeypatch) -> threading.Event:
    """Holds every hot-copy write queued from now on until the returned event is set."""
    hot_copy_writes_wait()  # the writes queued before are not held
    released = threading.Event()
    original = state_module._store

    def held(*args):
        released.wait(10)
        return original(*args)

    monkeypatch.setattr(state_module, "_store", held)
    return released


def test_the_answer_goes_out_before_its_hot_copy_is_written_and_no_reader_sees_a_stale_copy(
    api_client, kb, tenant, monkeypatch
):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    released = _slow_hot_copy_writes(monkeypatch)
    second = ask(api_client, conversation_id, "How much does the Team plan cost?")
    assert second["dedup"]["action"] == "answered"
    key = state_key(tenant_id=tenant.pk, conversation_id=conversation_id)
    assert _decode(conversation_id, redis_connection().get(key)).turn_count == 1, "answered before the copy moved"

    conversation = Conversation.objects.for_tenant(tenant).get(pk=conversation_id)
    with monkeypatch.context() as elsewhere:  # another process: it has no pending write of its own to wait for
        elsewhere.setattr(state_module, "_pending", {})
        rebuilt = state_load(conversation=conversation)
    assert rebuilt.source == "database" and rebuilt.turn_count == 2

    threading.Timer(0.2, released.set).start()
    own = state_load(conversation=conversation)  # this process waits for its own write, then reads it
    assert own.source == "redis" and own.turn_count == 2
    assert [t.turn_id for t in own.recent_turns] == [t.turn_id for t in rebuilt.recent_turns]


def test_a_forget_is_never_undone_by_a_write_queued_before_it(api_client, kb, tenant, monkeypatch):
    conversation_id = start(api_client, kb)
    released = _slow_hot_copy_writes(monkeypatch)
    ask(api_client, conversation_id, "How do I reset my password?")
    threading.Timer(0.2, released.set).start()
    state_forget(tenant_id=tenant.pk, conversation_id=conversation_id)
    hot_copy_writes_wait()
    assert redis_connection().get(state_key(tenant_id=tenant.pk, conversation_id=conversation_id)) is None


def test_a_hot_copy_write_that_fails_behind_the_answer_is_logged_and_raises_nothing(
    api_client, kb, tenant, monkeypatch, caplog
):
    conversation_id = start(api_client, kb)
    monkeypatch.setattr(settings, "REDIS_URL", "redis://127.0.0.1:1/0")  # the client is taken when it is queued
    body = ask(api_client, conversation_id, "How do I reset my password?")
    monkeypatch.undo()
    hot_copy_writes_wait()
    assert body["dedup"]["action"] == "answered"
    assert any("Redis unavailable writing" in record.getMessage() for record in caplog.records)
    assert redis_connection().get(state_key(tenant_id=tenant.pk, conversation_id=conversation_id)) is None


def test_a_forked_worker_starts_with_no_writer_thread_and_no_pending_write(monkeypatch):
    """A gunicorn or Celery worker forked from a process that had written a copy gets a writer of its own."""
    monkeypatch.setattr(state_module, "_writer", object())  # the parent's, whose thread the child does not have
    monkeypatch.setattr(state_module, "_pending", {"k": object()})
    child = os.fork()
    if child == 0:  # the child reports by its exit status only
        os._exit(0 if state_module._writer is None and state_module._pending == {} else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the fork hook did not forget the parent's writer"
