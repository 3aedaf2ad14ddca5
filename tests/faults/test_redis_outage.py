"""Redis killed (SIGKILL) in the middle of a conversation, then started again empty.

Guarantees shown: turns keep being answered from the database while Redis is gone; exclusions and question
dedup keep working because consumed items and QA pairs live in the database; when Redis returns the hot copy is
written again and agrees with the database; nothing any acknowledged turn wrote is lost.
"""

from __future__ import annotations

import os
import signal

import pytest
import redis

from conversations.models import ConsumedItem, Conversation, DedupEvent, Turn
from conversations.turn.state import hot_copy_writes_wait, state_key, state_load
from tests.faults.conftest import handbook_index
from tests.faults.helpers import ask, conversation_start, returns_within

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def _doc_ids(reply: dict) -> set[int]:
    return {source["document_id"] for source in reply["sources"]}


def test_redis_killed_mid_conversation_then_back_loses_nothing(own_redis, milvus_server, api_client, tenant, client):
    knowledge_base = handbook_index(tenant)
    conversation_id = conversation_start(api_client, knowledge_base.pk)
    cache = redis.Redis.from_url(own_redis.url)
    key = state_key(tenant_id=tenant.pk, conversation_id=conversation_id)

    first = ask(api_client, conversation_id, "How do I reset my password?")
    assert first["dedup"]["action"] == "answered" and first["sources"]
    hot_copy_writes_wait()
    assert cache.exists(key), "the hot copy is written to Redis while it is up"

    own_redis.stop()
    during = ask(api_client, conversation_id, "How much does the Team plan cost?")
    assert during["dedup"]["action"] == "answered"
    assert during["dedup"]["excluded_count"] == len(_doc_ids(first)), "turn 1's documents excluded, from the database"
    assert not _doc_ids(first) & _doc_ids(during)
    repeat = ask(api_client, conversation_id, "How can I reset my password?")
    assert repeat["dedup"]["action"] == "served_cached", "the QA pair of turn 1 is found without Redis"
    assert repeat["dedup"]["matched_turn_id"] == first["turn_id"]
    health = client.get("/api/health/").json()
    assert health["components"]["redis"]["status"] == "down"
    assert health["status"] in ("degraded", "down") and health["components"]["database"]["status"] == "ok"

    own_redis.start()  # same port, empty: the worst case for a cache
    assert not cache.exists(key)
    after = ask(api_client, conversation_id, "How do I switch on single sign-on?")
    assert after["dedup"]["action"] == "answered"
    shown = _doc_ids(first) | _doc_ids(during)
    assert after["dedup"]["excluded_count"] == len(shown)
    assert not shown & _doc_ids(after)

    # The hot cache refilled, and it agrees with the database.
    hot_copy_writes_wait()
    assert cache.exists(key), "the hot copy is written again once Redis is back"
    conversation = Conversation.objects.for_tenant(tenant).get(pk=conversation_id)
    hot = state_load(conversation=conversation)
    assert hot.source == "redis" and hot.turn_count == conversation.turn_count == 4
    turn_ids = Turn.objects.for_tenant(tenant).filter(conversation=conversation).order_by("number")
    assert [t.turn_id for t in hot.recent_turns] == list(turn_ids.values_list("pk", flat=True))

    # Every acknowledged turn is in the database with its consumed items and its audit event.
    turns = list(Turn.objects.for_tenant(tenant).filter(conversation=conversation).order_by("number"))
    assert [t.pk for t in turns] == [r["turn_id"] for r in (first, during, repeat, after)]
    assert [t.number for t in turns] == [1, 2, 3, 4]
    # One consumed row per document shown, stamped with the last turn that showed it (the sliding window).
    last_shown = {}
    for turn, reply in zip(turns, (first, during, repeat, after), strict=True):
        last_shown.update(dict.fromkeys(_doc_ids(reply), turn.number))
    consumed = dict(
        ConsumedItem.objects.for_tenant(tenant)
        .filter(conversation=conversation, kind="doc")
        .values_list("item_id", "turn_number")
    )
    assert consumed == last_shown
    assert DedupEvent.objects.for_tenant(tenant).filter(conversation_ref=conversation_id).count() == 4


def test_a_stalled_broker_fails_a_publish_in_seconds_not_never(own_redis):
    # A broker that keeps the TCP connection but stops answering (frozen with SIGSTOP, as after a failover behind a
    # NAT or a firewall that drops the flow): kombu's Redis transport waits forever by default, and every upload's
    # after-commit enqueue would hold its web worker. The document stays queued and the sweeper enqueues it again
    # (tests/retrieval), so failing the publish quickly loses nothing.
    from kbplatform.celery import app
    from retrieval.tasks import document_index

    with app.connection_for_write(own_redis.url) as connection:
        document_index.apply_async((1, 1), connection=connection, queue="stall-check")  # connected and working
        os.kill(own_redis.process.pid, signal.SIGSTOP)

        def publish() -> str:
            try:
                document_index.apply_async((2, 1), connection=connection, queue="stall-check")
            except Exception as exc:  # noqa: BLE001 - whichever error kombu raises, it must raise
                return repr(exc)
            return "published"

        try:
            outcome, seconds = returns_within(60, publish)
            assert outcome != "published" and seconds < 30, (outcome, seconds)
        finally:
            os.kill(own_redis.process.pid, signal.SIGCONT)
