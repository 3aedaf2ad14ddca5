"""What a label says and which labels train: plain functions, no I/O.

A support verdict judges a decision; a label says whether two questions are duplicates. `verdict_label` turns the
one into the other, for the decisions that judged a pair:

| the event                                                        | `correct` means | `incorrect` means |
|------------------------------------------------------------------|-----------------|-------------------|
| `served_cached` (served, or in shadow mode would have served)    | duplicate       | not a duplicate   |
| `bypassed` or `answered` with a matched stored question, refused | not a duplicate | duplicate         |
|   by a check of the pair (cosine gate, numbers, negation, head,  |                 |                   |
|   follow-up context)                                             |                 |                   |

Every other event gives no label: no stored question was compared (no candidate, small talk, `force_refresh`, an
intent off the allowlist), or the match was refused for its answer, not for its question (`ANSWER_REFUSALS`: no
stored answer, sources changed, no source cited, a partial index), which says nothing of whether the questions are
the same. Nor does a decision on a question the embedding model cannot read (`UNREADABLE_REASONS`): no similarity was
compared, and its vector would teach a verifier nothing but noise, whatever support says of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from conversations.dedup.decisions import (
    OTHER_MODEL_REASON,
    PARTIAL_INDEX_REASON,
    UNREADABLE_REASON,
    UNREADABLE_REPEAT_REASON,
)
from conversations.models import DedupAction, LabelSource, ReviewVerdict
from conversations.turn.turn_decision import MatchRefusal

# Refusals of a matched pair for its stored answer: the questions were not judged different.
ANSWER_REFUSALS = frozenset({*(str(refusal) for refusal in MatchRefusal), PARTIAL_INDEX_REASON, OTHER_MODEL_REASON})
# Decisions on a question the embedding model cannot read, served (an exact repeat) or not.
UNREADABLE_REASONS = frozenset({UNREADABLE_REASON, UNREADABLE_REPEAT_REASON})
# Which source's label of one event stands, highest first. An end user's thumbs-down is a suspicion: it never
# trains on its own (`training_labels_pick`), it puts the event in front of support (the review queue).
SOURCE_PRECEDENCE = (LabelSource.SUPPORT, LabelSource.IMPORT, LabelSource.END_USER)
TRAINING_SOURCES = frozenset({LabelSource.SUPPORT, LabelSource.IMPORT})


def verdict_label(*, action: str, has_match: bool, reason: str, verdict: str) -> bool | None:
    """Whether the event's two questions are duplicates by a support verdict on it (see the module's table), or None
    when the verdict says nothing about that."""
    if verdict not in (ReviewVerdict.CORRECT, ReviewVerdict.INCORRECT) or not has_match:
        return None
    if reason in UNREADABLE_REASONS:
        return None
    correct = verdict == ReviewVerdict.CORRECT
    if action == DedupAction.SERVED_CACHED:
        return correct
    if action in (DedupAction.BYPASSED, DedupAction.ANSWERED) and reason not in ANSWER_REFUSALS:
        return not correct
    return None


class LabelRow(Protocol):
    pk: int
    dedup_event_id: int | None
    source: str


Row = TypeVar("Row", bound=LabelRow)


def training_labels_pick(labels: Iterable[Row]) -> list[Row]:
    """The labels a verifier trains on, in id order: support and imported labels only (an end user's thumbs-down is
    left out until support confirms it, which writes a support label of the same event), and one per event, the
    source first in SOURCE_PRECEDENCE. Labels of no event all count. The rows pass through as they came, so
    whatever a row carries of its event (the review queue's pick, its reason and inclusion probability, the same for
    every label of that event) reaches training unchanged."""
    best: dict[int, Row] = {}
    kept: list[Row] = []
    for label in labels:
        if label.source not in TRAINING_SOURCES:
            continue
        if label.dedup_event_id is None:
            kept.append(label)
            continue
        held = best.get(label.dedup_event_id)
        if held is None or SOURCE_PRECEDENCE.index(label.source) < SOURCE_PRECEDENCE.index(held.source):
            best[label.dedup_event_id] = label
    return sorted([*kept, *best.values()], key=lambda label: label.pk)
