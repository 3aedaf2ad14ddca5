"""CPU cost of the conversation hot copy's codec (conversations.turn.state: `_encode` on every turn's Redis refresh,
`_decode` on every turn's read), by conversation length, against the previous codec run in the same process as the
baseline: JSON with each question vector as a base64 string and consumed ids decoded into frozen dataclasses
(state version 3's layout, kept here only as that baseline). The baseline carries what later versions added to the
state, so both codecs carry the same state: each stored answer's origin (version 5, through `_stored_encode`),
each turn's embedding model id (version 6, a seventh field of each turn's JSON array) and whether it was answered
from a partial index (version 7, an eighth field).

The states are built like the platform's as of state version 7: real MTRAG questions, 384-float unit vectors, each
turn naming the embedding model in use (`retrieval.embeddings.model_id()`, 12 hex digits), stored answers (about
600 characters, five cited chunks) on the newest 20 answered turns, ten consumed ids per turn.

Usage: .venv/bin/python bench/state_codec.py [--turns 3,20,100] [--repeat 300]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402

from conversations.dedup.decisions import ConsumedRef  # noqa: E402
from conversations.turn.state import (  # noqa: E402
    STATE_VERSION,
    ConversationState,
    RecentTurn,
    StoredAnswer,
    _decode,
    _encode,
    _stored_decode,
    _stored_encode,
    state_after_turn,
)
from retrieval.embeddings import model_id  # noqa: E402

MTRAG = ROOT.parent / "shared" / "data" / "mtrag" / "conversations.jsonl"


@dataclass(frozen=True)
class BaselineConsumedRef:
    """ConsumedRef as it was with the version-3 codec (a frozen dataclass, now a named tuple)."""

    kind: str
    item_id: int
    turn_number: int


def baseline_encode(state: ConversationState) -> bytes:
    """The version-3 copy: one JSON document, vectors as base64 strings; each turn also names its vector's model
    (seventh field), as every copy must since version 6, and whether it was answered from a partial index (last field),
    as every copy must since version 7."""
    return json.dumps(
        {
            "v": 3,
            "turn_count": state.turn_count,
            "rev": state.revision,
            "turns": [
                [
                    t.turn_id,
                    t.number,
                    t.question,
                    base64.b64encode(np.asarray(t.vector, dtype="<f4").tobytes()).decode(),
                    t.answerable,
                    _stored_encode(t.stored),
                    t.vector_model,
                    t.partial_index,
                ]
                for t in state.recent_turns
            ],
            "consumed": [[c.kind, c.item_id, c.turn_number] for c in state.consumed],
        },
        separators=(",", ":"),
    ).encode()


def baseline_decode(conversation_id: int, raw: bytes) -> ConversationState:
    data = json.loads(raw)
    return ConversationState(
        conversation_id=conversation_id,
        turn_count=int(data["turn_count"]),
        recent_turns=[
            RecentTurn(
                int(t[0]),
                int(t[1]),
                t[2],
                np.frombuffer(base64.b64decode(t[3]), dtype="<f4"),
                bool(t[4]),
                _stored_decode(int(t[0]), t[5]),
                str(t[6]),
                bool(t[7]),
            )
            for t in data["turns"]
        ],
        consumed=[BaselineConsumedRef(c[0], int(c[1]), int(c[2])) for c in data["consumed"]],
        source="redis",
        revision=int(data["rev"]),
    )


def state_of(turns: int, questions: list[str], rng: np.random.Generator, vector_model: str) -> ConversationState:
    state = ConversationState(conversation_id=1, turn_count=0)
    for number in range(1, turns + 1):
        vector = rng.standard_normal(384).astype(np.float32)
        vector /= np.linalg.norm(vector)
        chunks = [int(i) for i in rng.integers(1, 10**6, size=5)]
        stored = StoredAnswer(
            turn_id=number,
            answer=" ".join(questions[(number + k) % len(questions)] for k in range(6))[:600],
            answer_tokens=120,
            context_tokens=900,
            elapsed_ms=180.5,
            source_chunk_ids=chunks,
            source_chunks={str(c): {"hash": f"{c:064x}", "score": 0.61, "document_id": c // 3} for c in chunks},
        )
        turn = RecentTurn(number, number, questions[number % len(questions)], vector, True, stored, vector_model)
        consumed = [ConsumedRef("chunk", c, number) for c in chunks] + [
            ConsumedRef("doc", c // 3, number) for c in chunks
        ]
        state = state_after_turn(state=state, turn=turn, consumed=consumed)
    return state


def same_state(back: ConversationState, state: ConversationState) -> bool:
    """Whether a decoded copy carries everything of the state the platform reads back (all but `source`)."""
    if (back.turn_count, back.revision) != (state.turn_count, state.revision) or len(back.recent_turns) != len(
        state.recent_turns
    ):
        return False
    for a, b in zip(back.recent_turns, state.recent_turns, strict=True):
        fields = (a.turn_id, a.number, a.question, a.answerable, a.stored, a.vector_model, a.partial_index)
        if fields != (b.turn_id, b.number, b.question, b.answerable, b.stored, b.vector_model, b.partial_index):
            return False
        if not np.array_equal(a.vector, b.vector):
            return False
    return [(c.kind, c.item_id, c.turn_number) for c in back.consumed] == [
        (c.kind, c.item_id, c.turn_number) for c in state.consumed
    ]


def timed(function, repeat: int) -> float:  # noqa: ANN001
    """Median microseconds of one call."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="3,20,100")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    questions = []
    for line in MTRAG.open(encoding="utf-8"):
        questions.extend(turn["question"] for turn in json.loads(line)["turns"])
    rng = np.random.default_rng(3)
    vector_model = model_id()
    print(f"state version {STATE_VERSION}, every turn's vector model {vector_model}")
    print(f"{'turns':>5} {'codec':<22} {'bytes':>8} {'encode us':>10} {'decode us':>10} {'both us':>9}  vs baseline")
    for turns in [int(t) for t in args.turns.split(",")]:
        state = state_of(turns, questions, rng, vector_model)
        # Both codecs must carry the same state, or the comparison means nothing.
        for decode, encode in ((_decode, _encode), (baseline_decode, baseline_encode)):
            if not same_state(decode(1, encode(state)), state):
                raise SystemExit(f"{encode.__name__} does not carry the whole state at {turns} turns")
        rows = {}
        for label, encode, decode in (
            ("JSON+base64 (baseline)", baseline_encode, baseline_decode),
            ("header+float32 (now)", _encode, _decode),
        ):
            raw = encode(state)
            encode_us = timed(lambda encode=encode, state=state: encode(state), args.repeat)
            decode_us = timed(lambda decode=decode, raw=raw: decode(1, raw), args.repeat)
            rows[label] = (len(raw), encode_us, decode_us)
        base_total = sum(rows["JSON+base64 (baseline)"][1:])
        for label, (size, encode_us, decode_us) in rows.items():
            total = encode_us + decode_us
            timings = f"{encode_us:>10.0f} {decode_us:>10.0f} {total:>9.0f}"
            print(f"{turns:>5} {label:<22} {size:>8,} {timings}  {total / base_total:.2f}x")


if __name__ == "__main__":
    main()
