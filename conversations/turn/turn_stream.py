"""A turn answered as a stream of events (`turn_stream`): the same pipeline as `turn_ask`, with the answer passed on
as it is generated.

Events, in order: `decision` (the dedup decision; for a served stored answer, small talk or a search that found
nothing to answer from, the whole answer), `sources` (what the turn shows), `delta` (pieces of a generated answer, in
order), then `done` (the turn id, token counts and the complete answer) or `error` (the answer service failed; the
turn is recorded as failed).

Exactly once: everything that can refuse the turn (400, 404, 410, 409) runs before the first event, so a refusal is
an ordinary JSON error. A turn with nothing to generate is recorded before its first event. A turn whose answer is
generated is recorded once the answer is complete (before `done`), once the answer service failed (before
`error`), or, when the client goes away first, when the stream is closed (`TurnStream.close`, which the WSGI server
calls on a disconnect): recorded `interrupted`, with what was streamed kept in `answer_partial` and no answer, so it
never serves a later duplicate; the upstream request is closed then too.

A stream that has begun always ends with `done` or `error`: when the turn cannot be recorded at all (the database
went away mid-answer), the last event is an `error` with `turn_id` null and status 503, nothing was stored, and the
stream makes no later attempt (a turn recorded after the client was told none was would be a turn it never knew of).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import InterfaceError, OperationalError

from conversations.models import AnswerState
from conversations.turn.answering import AnswerDelta, GeneratedAnswer
from conversations.turn.sources import SourceView
from conversations.turn.turn_decision import TurnKind
from conversations.turn.turns import (
    TurnOutcome,
    TurnPrepared,
    turn_answer_apply,
    turn_record,
)
from kbplatform.errors import ApplicationError

logger = logging.getLogger(__name__)

EVENT_TYPES = ("decision", "sources", "delta", "done", "error")


@dataclass(frozen=True)
class TurnEvent:
    """One event of a streamed turn: `name` is one of EVENT_TYPES, `data` plain values (the `sources` event's
    `index` is the IndexState, for the API to render)."""

    name: str
    data: dict[str, Any]


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def turn_dedup_body(
    *,
    action: str,
    intent: str,
    similarity: float | None,
    matched_turn_id: int | None,
    excluded_count: int,
    relaxed: bool,
    shadow_action: str | None,
    reason: str,
    curated_answer_id: int | None = None,
) -> dict[str, Any]:
    """The `dedup` object of a turn's response (JSON and stream alike). `curated_answer_id`: the curated answer a
    served turn gave (`matched_turn_id` is then null, or names the earlier turn whose copy of it was served)."""
    return {
        "action": action,
        "intent": intent,
        "similarity": _float_or_none(similarity),
        "matched_turn_id": matched_turn_id,
        "excluded_count": int(excluded_count),
        "relaxed": bool(relaxed),
        "shadow_action": shadow_action,
        "reason": reason,
        "curated_answer_id": curated_answer_id,
    }


def turn_sources_body(sources: list[SourceView]) -> list[dict[str, Any]]:
    """The `sources` list of a turn's response (JSON and stream alike)."""
    return [
        {
            "chunk_id": int(source.chunk_id),
            "document_id": int(source.document_id),
            "external_id": source.external_id,
            "document_external_id": source.document_external_id,
            "score": _float_or_none(source.score),
            "similarity": _float_or_none(source.similarity),
            "text": source.text,
        }
        for source in sources
    ]


def _done(outcome: TurnOutcome) -> TurnEvent:
    turn = outcome.turn
    return TurnEvent(
        "done",
        {
            "turn_id": turn.pk,
            "answer": outcome.answer,
            "answer_tokens": int(turn.answer_tokens),
            "context_tokens": int(turn.context_tokens),
            "rewritten_question": outcome.rewritten_question or None,
        },
    )


def _error(message: str, *, extra: dict, status: int, outcome: TurnOutcome | None) -> TurnEvent:
    turn_id = outcome.turn.pk if outcome is not None else None
    return TurnEvent("error", {"message": message, "extra": extra, "status": status, "turn_id": turn_id})


NOT_RECORDED_MESSAGE = "The turn could not be recorded (the database is unavailable); nothing was saved. Ask again."
INTERNAL_MESSAGE = "Internal error; it has been logged."


def _unrecorded(exc: Exception) -> TurnEvent:
    """The last event of a stream whose turn could not be recorded: 503 when the database failed (retrying later
    helps), else 500."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return TurnEvent("error", {"message": NOT_RECORDED_MESSAGE, "extra": {}, "status": 503, "turn_id": None})
    return TurnEvent("error", {"message": INTERNAL_MESSAGE, "extra": {}, "status": 500, "turn_id": None})


class TurnStream:
    """The events of one turn (an iterator of TurnEvent). `close()` ends it early, recording the turn if it was not
    recorded yet; it is safe to call more than once, and after the stream ended."""

    def __init__(self, *, prepared: TurnPrepared, outcome: TurnOutcome | None) -> None:
        self.prepared = prepared
        self.outcome = outcome  # set once the turn is recorded
        # Set once recording the turn failed and the client was told so: no later attempt is made.
        self.unrecorded = False
        self._streamed: list[str] = []
        self._events = self._run()

    def __iter__(self) -> Iterator[TurnEvent]:
        return self

    def __next__(self) -> TurnEvent:
        return next(self._events)

    def close(self) -> None:
        # Closing the generator runs its `finally` when it had started; one closed before its first event never ran
        # it, so the turn is recorded here in that case.
        self._events.close()
        self._record_interrupted()

    def _record_interrupted(self) -> None:
        if self.outcome is not None or self.unrecorded:
            return
        self.unrecorded = True  # one attempt: on failure there is no one left to tell
        try:
            self.outcome = turn_record(
                prepared=self.prepared,
                answer_state=AnswerState.INTERRUPTED,
                answer_partial="".join(self._streamed),
                answer_error="The client went away before the answer was complete.",
            )
        except Exception:
            logger.exception("an interrupted streamed turn could not be recorded")
        else:
            self.unrecorded = False

    def _record_failed(self, message: str) -> TurnEvent | None:
        """Record the turn as failed with `message`; None when that worked, else the stream's last event."""
        try:
            self.outcome = turn_record(
                prepared=self.prepared,
                answer_state=AnswerState.FAILED,
                answer_partial="".join(self._streamed),
                answer_error=message,
            )
        except Exception as exc:
            logger.exception("a failed streamed turn could not be recorded")
            self.unrecorded = True
            return _unrecorded(exc)
        return None

    def _run(self) -> Iterator[TurnEvent]:
        prepared = self.prepared
        decision, answer = prepared.decision, prepared.answer
        duplicate = decision.duplicate
        served = not prepared.answer_pending
        try:
            yield TurnEvent(
                "decision",
                {
                    "dedup": turn_dedup_body(
                        action=decision.action,
                        intent=prepared.judged.facts.intent,
                        similarity=duplicate.similarity,
                        matched_turn_id=duplicate.turn_id if duplicate.hit else None,
                        excluded_count=len(decision.excluded),
                        relaxed=answer.relaxed,
                        shadow_action=decision.shadow_action,
                        reason=decision.reason,
                        curated_answer_id=(
                            decision.matched.curated_answer_id
                            if decision.kind == TurnKind.STORED and decision.matched is not None
                            else None
                        ),
                    ),
                    # The whole answer of a turn that generates none (a stored answer, small talk, nothing found); else
                    # null.
                    "answer": self.outcome.answer if served and self.outcome is not None else None,
                    "rewritten_question": prepared.rewritten_question or None,
                },
            )
            yield TurnEvent("sources", {"sources": turn_sources_body(answer.sources), "index": answer.searched_index})
            if served:
                yield _done(self.outcome)
                return
            yield from self._answer()
        finally:
            self._record_interrupted()

    def _answer(self) -> Iterator[TurnEvent]:
        prepared = self.prepared
        pieces = prepared.generator.stream(
            question=prepared.answer.answer_question, passages=prepared.answer.passages, history=prepared.history
        )
        try:
            for piece in pieces:
                if isinstance(piece, AnswerDelta):
                    self._streamed.append(piece.text)
                    yield TurnEvent("delta", {"text": piece.text})
                elif isinstance(piece, GeneratedAnswer):
                    turn_answer_apply(prepared=prepared, generated=piece)
            self.outcome = turn_record(prepared=prepared)
        except ApplicationError as exc:
            # The client has had a 200 and the first events: the failure is an event, and the turn is recorded so
            # (what was shown is consumed, the audit event written), with no answer to serve again.
            yield self._record_failed(exc.message) or _error(
                exc.message, extra=exc.extra, status=exc.status_code, outcome=self.outcome
            )
            return
        except (OperationalError, InterfaceError) as exc:
            # Recording the complete turn failed on the database: nothing was written (one transaction), and a
            # second attempt on the same broken connection would fail the same way.
            logger.warning("a streamed turn could not be recorded: %s", exc)
            self.unrecorded = True
            yield _unrecorded(exc)
            return
        except Exception:
            logger.exception("streamed turn failed while answering")
            yield self._record_failed(INTERNAL_MESSAGE) or _error(
                INTERNAL_MESSAGE, extra={}, status=500, outcome=self.outcome
            )
            return
        finally:
            # On a disconnect (GeneratorExit at a yield above) this closes the upstream request too.
            pieces.close()
        yield _done(self.outcome)


def turn_stream(*, prepared: TurnPrepared) -> TurnStream:
    """`turn_ask`, streamed, of a turn `turn_prepare` made (which raised every refusal, before any event): the returned
    TurnStream yields the turn's events and records the turn exactly once (see the module's note)."""
    outcome = None if prepared.answer_pending else turn_record(prepared=prepared)
    return TurnStream(prepared=prepared, outcome=outcome)
