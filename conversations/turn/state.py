"""The hot copy of a conversation's state in Redis: the recent QA pairs (question, vector and the embedding model
that made it, whether answered, and whether from a partial index) and the consumed ids of the recent turns, under
one key per conversation that names the tenant, with the policy's TTL.

Redis is only a cache. Every read is checked against the conversation's `turn_count` and `state_revision` from the
database (read on every turn anyway): a copy that is missing, stale (a turn was written, or a client's answer stored,
while Redis was down, or by a concurrent request) or unreadable is rebuilt from the database. Redis being down is
never an error here.

A turn writes its copy behind its answer (`state_store_behind`): on one writer thread per process, after the turn's
rows are committed, while the response is made. The check above makes that safe: until the write lands, a read of
the copy from any process sees the older turn count and rebuilds from the database. Within a process, reads and
forgets of a conversation wait for its pending write first, so the process reads its own writes and a forget is
never undone by a write queued before it.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
from django.conf import settings
from redis import Redis
from redis.exceptions import RedisError

from conversations.dedup.decisions import ConsumedRef
from conversations.models import ConsumedItem, Conversation, Turn
from kbplatform.redis_client import redis_connection

logger = logging.getLogger(__name__)

# The layout of the copy. A copy of another version is never read: the state is rebuilt from the rows, which hold
# everything, so a change of layout changes this number and needs nothing else.
STATE_VERSION = 8
# Enough history for the largest windows a policy allows (question and exclusion windows are at most 100).
MAX_WINDOW = 100
# The newest turns keep their stored answer in the hot copy too, so a duplicate of one of them is served without
# reading its row; older matches (larger question windows) read the row. Bounds the copy's size.
ANSWERS_KEPT = 20


@dataclass(frozen=True)
class StoredAnswer:
    """What serving a QA pair's answer again needs: the answer, what it cost, and the sources it cites with the
    content hash each had then (a source changed since means the answer is not served)."""

    turn_id: int | None  # None for a curated answer, which is no QA pair of a conversation
    answer: str
    answer_tokens: int
    context_tokens: int
    elapsed_ms: float
    source_chunk_ids: list[int]
    source_chunks: dict[str, dict]
    # For a turn that served a stored answer: the QA pair whose answer it gave. Serving this copy again serves that
    # pair's answer as it is now, so a client's later correction of it reaches every copy.
    origin_turn_id: int | None = None
    # For an answer of a curated answer (`CuratedAnswer`), served or a copy of one served: that answer. Served again
    # only while it is enabled, and as it reads then, so an edit or a disable takes effect on the next turn.
    curated_answer_id: int | None = None

    @classmethod
    def of_turn(cls, turn: Turn) -> StoredAnswer:
        return cls(
            turn_id=turn.pk,
            answer=turn.answer,
            answer_tokens=turn.answer_tokens,
            context_tokens=turn.context_tokens,
            elapsed_ms=turn.elapsed_ms,
            source_chunk_ids=[int(i) for i in turn.source_chunk_ids],
            source_chunks=dict(turn.source_chunks),
            origin_turn_id=turn.answer_origin_id,
            curated_answer_id=turn.curated_answer_id,
        )


def turn_cites(turn: Turn) -> bool:
    """Whether the turn's answer cites a source, or is a curated answer's (which stands without citations): one that
    cites none (small talk, "nothing found", a generated answer citing none of its passages) is never served to a
    duplicate, as nothing in the knowledge base vouches for it."""
    return bool(turn.source_chunk_ids) or turn.curated_answer_id is not None


def decided_question(turn: Turn) -> str:
    """The question a turn was decided and searched with, which its vector embeds: the standalone rewrite of a
    follow-up when it has one, else the question as asked."""
    return turn.rewritten_question or turn.question


@dataclass
class RecentTurn:
    turn_id: int
    number: int
    question: str
    vector: np.ndarray
    answerable: bool
    stored: StoredAnswer | None = None  # kept for the newest ANSWERS_KEPT answered turns only
    # The embedding model that made `vector` (Turn.question_vector_model): compared only with vectors of that model.
    vector_model: str = ""
    # Turn.partial_index: answered from a partial index, so never served as a duplicate.
    partial_index: bool = False
    # Its answer cites a source or is a curated answer's (`turn_cites`): one citing none is never served.
    cites: bool = True


@dataclass
class ConversationState:
    conversation_id: int
    turn_count: int
    recent_turns: list[RecentTurn] = field(default_factory=list)  # oldest first
    consumed: list[ConsumedRef] = field(default_factory=list)
    source: str = "database"  # "redis" | "database": for the audit log and tests
    revision: int = 0  # the conversation's state_revision this state was built from

    def previous_vector(self) -> np.ndarray | None:
        return self.recent_turns[-1].vector if self.recent_turns else None


def state_key(*, tenant_id: int, conversation_id: int) -> str:
    """Names the tenant; prefixed like the cache (one prefix per deployment, one per test run)."""
    prefix = settings.CACHES.get("default", {}).get("KEY_PREFIX") or "kb"
    return f"{prefix}:conv:t{int(tenant_id)}:c{int(conversation_id)}"


def vector_to_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def vector_from_bytes(raw: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(raw), dtype="<f4")


# The copy is bytes: MAGIC, the length of a JSON header (4 bytes, little-endian), the header (everything but the
# vectors), then every turn's question vector as float32, oldest turn first, as `dims` in the header says. The raw
# floats are sliced out without parsing or decoding, which a JSON document with a base64 string per vector cannot be
# (bench/state_codec.py measures the two).
MAGIC = b"KBS" + bytes([STATE_VERSION])
_HEADER_LENGTH = struct.Struct("<I")


def _encode(state: ConversationState) -> bytes:
    vectors = [np.asarray(t.vector, dtype="<f4").ravel() for t in state.recent_turns]
    header = json.dumps(
        {
            "turn_count": state.turn_count,
            "rev": state.revision,
            "turns": [
                [
                    t.turn_id,
                    t.number,
                    t.question,
                    t.answerable,
                    _stored_encode(t.stored),
                    t.vector_model,
                    t.partial_index,
                    t.cites,
                ]
                for t in state.recent_turns
            ],
            "dims": [len(v) for v in vectors],
            "consumed": [[c.kind, c.item_id, c.turn_number] for c in state.consumed],
        },
        separators=(",", ":"),
    ).encode()
    header += b" " * (-(len(MAGIC) + _HEADER_LENGTH.size + len(header)) % 4)  # floats start 4-byte aligned
    body = np.concatenate(vectors).tobytes() if vectors else b""
    return b"".join((MAGIC, _HEADER_LENGTH.pack(len(header)), header, body))


def _stored_encode(stored: StoredAnswer | None) -> list | None:
    if stored is None:
        return None
    return [
        stored.answer,
        stored.answer_tokens,
        stored.context_tokens,
        stored.elapsed_ms,
        stored.source_chunk_ids,
        stored.source_chunks,
        stored.origin_turn_id,
        stored.curated_answer_id,
    ]


def _stored_decode(turn_id: int, raw: list | None) -> StoredAnswer | None:
    if raw is None:
        return None
    # A copy written before curated answers has no eighth field: none of its answers was a curated one.
    answer, answer_tokens, context_tokens, elapsed_ms, chunk_ids, chunks, origin, curated = (*raw, None)[:8]
    return StoredAnswer(
        turn_id=turn_id,
        answer=str(answer),
        answer_tokens=int(answer_tokens),
        context_tokens=int(context_tokens),
        elapsed_ms=float(elapsed_ms),
        source_chunk_ids=[int(i) for i in chunk_ids],
        source_chunks=dict(chunks),
        origin_turn_id=None if origin is None else int(origin),
        curated_answer_id=None if curated is None else int(curated),
    )


def _decode(conversation_id: int, raw: bytes) -> ConversationState:
    if raw[: len(MAGIC)] != MAGIC:
        raise ValueError("state version")
    offset = len(MAGIC) + _HEADER_LENGTH.size
    (header_length,) = _HEADER_LENGTH.unpack_from(raw, len(MAGIC))
    data = json.loads(raw[offset : offset + header_length])
    floats = np.frombuffer(raw, dtype="<f4", offset=offset + header_length)
    dims = [int(d) for d in data["dims"]]
    if len(dims) != len(data["turns"]) or sum(dims) != len(floats):
        raise ValueError("state vectors")
    bounds = np.cumsum([0, *dims])
    return ConversationState(
        conversation_id=conversation_id,
        turn_count=int(data["turn_count"]),
        recent_turns=[
            RecentTurn(
                int(t[0]),
                int(t[1]),
                t[2],
                floats[bounds[i] : bounds[i + 1]],
                bool(t[3]),
                _stored_decode(int(t[0]), t[4]),
                str(t[5]),
                bool(t[6]),
                bool(t[7]),
            )
            for i, t in enumerate(data["turns"])
        ],
        consumed=[ConsumedRef._make(c) for c in data["consumed"]],
        source="redis",
        revision=int(data["rev"]),
    )


TURN_FIELDS_KEPT = (
    "tenant_id",
    "conversation_id",
    "number",
    "question",
    "rewritten_question",
    "question_vector",
    "question_vector_model",
    "partial_index",
    "answer",
    "answer_tokens",
    "context_tokens",
    "elapsed_ms",
    "source_chunk_ids",
    "source_chunks",
    "answer_origin_id",
    "curated_answer_id",
)


def state_from_database(*, conversation: Conversation) -> ConversationState:
    """The state rebuilt from the rows (the source of truth)."""
    tenant_id = conversation.tenant_id
    turns = list(
        Turn.objects.for_tenant(tenant_id)
        .filter(conversation=conversation)
        .order_by("-number")
        .only(*TURN_FIELDS_KEPT)[:MAX_WINDOW]
    )
    first_turn = max(1, conversation.turn_count + 1 - MAX_WINDOW)
    consumed = (
        ConsumedItem.objects.for_tenant(tenant_id)
        .filter(conversation=conversation, turn_number__gte=first_turn)
        .values_list("kind", "item_id", "turn_number")
    )
    return ConversationState(
        conversation_id=conversation.pk,
        turn_count=conversation.turn_count,
        recent_turns=_answers_trimmed(
            [
                RecentTurn(
                    turn.pk,
                    turn.number,
                    decided_question(turn),
                    vector_from_bytes(turn.question_vector),
                    bool(turn.answer),
                    StoredAnswer.of_turn(turn) if turn.answer else None,
                    turn.question_vector_model,
                    turn.partial_index,
                    turn_cites(turn),
                )
                for turn in reversed(turns)
            ]
        ),
        consumed=[ConsumedRef(kind, item_id, number) for kind, item_id, number in consumed],
        source="database",
        revision=conversation.state_revision,
    )


def _answers_trimmed(turns: list[RecentTurn]) -> list[RecentTurn]:
    """The turns, with stored answers kept on the newest ANSWERS_KEPT answered ones only (pure)."""
    kept = 0
    trimmed = []
    for turn in reversed(turns):
        if turn.stored is not None:
            kept += 1
            if kept > ANSWERS_KEPT:
                turn = replace(turn, stored=None)
        trimmed.append(turn)
    return trimmed[::-1]


def state_load(*, conversation: Conversation) -> ConversationState:
    """The conversation's state: Redis when its copy is current, else the database. A conversation without a turn
    has none to read from either: its state is empty (its rows say so: turns are counted on the row)."""
    if conversation.turn_count == 0:
        return ConversationState(
            conversation_id=conversation.pk, turn_count=0, source="database", revision=conversation.state_revision
        )
    key = state_key(tenant_id=conversation.tenant_id, conversation_id=conversation.pk)
    connection = redis_connection()
    if connection is not None:
        _pending_write_wait(key)
        try:
            raw = connection.get(key)
            if raw is not None:
                state = _decode(conversation.pk, raw)
                if state.turn_count == conversation.turn_count and state.revision == conversation.state_revision:
                    return state
        except RedisError:
            logger.warning("Redis unavailable reading %s: using the database", key)
        except (ValueError, KeyError, IndexError, TypeError, struct.error):
            logger.warning("unreadable conversation state %s: rebuilding from the database", key)
    return state_from_database(conversation=conversation)


def state_after_turn(
    *,
    state: ConversationState,
    turn: RecentTurn,
    consumed: list[ConsumedRef],
) -> ConversationState:
    """The state once `turn` is written, when no other turn came in between (pure)."""
    turns = _answers_trimmed([*state.recent_turns, turn][-MAX_WINDOW:])
    first_turn = max(1, turn.number + 1 - MAX_WINDOW)
    new_keys = {(c.kind, c.item_id) for c in consumed}
    kept = [c for c in state.consumed if (c.kind, c.item_id) not in new_keys and c.turn_number >= first_turn]
    return ConversationState(
        conversation_id=state.conversation_id,
        turn_count=turn.number,
        recent_turns=turns,
        consumed=kept + list(consumed),
        source=state.source,
        revision=state.revision,
    )


def state_store(*, tenant_id: int, state: ConversationState, ttl_seconds: int) -> bool:
    """Write the hot copy; False (and nothing raised) when Redis is down or absent."""
    connection = redis_connection()
    if connection is None:
        return False
    return _store(connection, state_key(tenant_id=tenant_id, conversation_id=state.conversation_id), state, ttl_seconds)


def _store(connection: Redis, key: str, state: ConversationState, ttl_seconds: int) -> bool:
    try:
        connection.set(key, _encode(state), ex=max(1, int(ttl_seconds)))
        return True
    except RedisError:
        logger.warning("Redis unavailable writing %s: the database stays the source of truth", key)
        return False


# Writes queued by state_store_behind: one thread keeps them in order; the newest pending write of each key is
# kept so a read or forget of that key in this process can wait for it.
_writer: ThreadPoolExecutor | None = None
_writer_lock = threading.Lock()
_pending: dict[str, Future] = {}
# How long a read waits for this process's own pending write before reading what Redis has (a slow Redis makes the
# read rebuild from the database, as a stale copy does).
PENDING_WRITE_WAIT_SECONDS = 1.0


def state_store_behind(*, tenant_id: int, state: ConversationState, ttl_seconds: int) -> None:
    """`state_store` on the process's writer thread: the caller goes on at once. The Redis client is the caller's
    (its settings at the time of the call); the copy is encoded and written on the thread. Nothing is raised, now or
    later: a failed write is logged and leaves the older copy, which the next read finds stale."""
    global _writer
    connection = redis_connection()
    if connection is None:
        return
    key = state_key(tenant_id=tenant_id, conversation_id=state.conversation_id)
    with _writer_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hot-copy")
        future = _writer.submit(_store_behind, connection, key, state, ttl_seconds)
        _pending[key] = future
    future.add_done_callback(lambda done: _pending_done(key, done))


def _store_behind(connection: Redis, key: str, state: ConversationState, ttl_seconds: int) -> bool:
    try:
        return _store(connection, key, state, ttl_seconds)
    except Exception:  # on the writer thread nothing may escape: the next read rebuilds the copy
        logger.exception("hot copy %s not written: the database stays the source of truth", key)
        return False


def _writer_forget() -> None:
    # A forked child (a gunicorn or Celery worker) inherits the executor object but not its thread, and none of the
    # parent's pending writes.
    global _writer, _pending, _writer_lock
    _writer, _pending, _writer_lock = None, {}, threading.Lock()


os.register_at_fork(after_in_child=_writer_forget)


def _pending_done(key: str, done: Future) -> None:
    with _writer_lock:
        if _pending.get(key) is done:
            del _pending[key]


def _pending_write_wait(key: str) -> None:
    with _writer_lock:
        future = _pending.get(key)
    if future is not None:
        try:
            future.result(timeout=PENDING_WRITE_WAIT_SECONDS)
        except TimeoutError:
            logger.warning("hot copy %s still being written after %.1fs", key, PENDING_WRITE_WAIT_SECONDS)


def hot_copy_writes_wait(timeout: float = 5.0) -> None:
    """Wait until every write this process queued has landed (or failed): for tests and for a clean shutdown."""
    with _writer_lock:
        futures = list(_pending.values())
    for future in futures:
        try:
            future.result(timeout=timeout)
        except TimeoutError:
            logger.warning("a hot copy write is still pending after %.1fs", timeout)


def state_forget(*, tenant_id: int, conversation_id: int) -> None:
    """Drop the hot copy, after any write of it this process has queued, so that write cannot bring it back."""
    connection = redis_connection()
    if connection is None:
        return
    key = state_key(tenant_id=tenant_id, conversation_id=conversation_id)
    _pending_write_wait(key)
    try:
        connection.delete(key)
    except RedisError:
        logger.warning("Redis unavailable forgetting conversation %s", conversation_id)
