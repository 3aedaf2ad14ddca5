"""Which decisions are worth a person's minute: the review queue's picking, plain functions, no I/O.

A day's queue of one tenant holds at most its quota of unreviewed decisions whose pair a verdict can label
(`label_rules.verdict_label`), chosen in this order:
1. flagged by a user: a thumbs-down on a served stored answer (`DedupEvent.suspected_false_hit`), oldest first;
2. then, taking turns, the strongest of each:
   - the duplicate head and the cosine disagree: the head calls the pair a duplicate while the cosine is under the
     gate, or the head refuses a pair whose cosine alone would serve it (at or above HEADLESS_THRESHOLD_FLOOR);
     strongest = the further apart the two are;
   - near the gate: a cosine within NEAR_GATE_MARGIN of the gate, or a head probability within NEAR_CUT_MARGIN of
     its cut; strongest = the closest.
Decisions that are none of these are not picked: a person's verdict on them teaches little the head does not know.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import zip_longest

from conversations.decisions import HEADLESS_THRESHOLD_FLOOR

NEAR_GATE_MARGIN = 0.03
NEAR_CUT_MARGIN = 0.10


class PickReason(StrEnum):
    FLAGGED = "flagged"  # a user's thumbs-down
    DISAGREEMENT = "disagreement"  # the head and the cosine disagree
    NEAR_GATE = "near_gate"  # close to the cosine gate or the head's cut


@dataclass(frozen=True)
class ReviewCandidate:
    event_id: int
    similarity: float | None  # cosine of the matched pair
    gate: float  # the cosine gate the decision applied (the event's threshold)
    probability: float | None  # the duplicate head's, None when it did not score the pair
    cut: float  # the head's cut
    flagged: bool  # suspected false hit


def pick_reason(candidate: ReviewCandidate) -> tuple[PickReason, float] | None:
    """Why the decision is worth reviewing and how strongly (higher first within a reason), or None."""
    if candidate.flagged:
        return PickReason.FLAGGED, 0.0
    similarity, probability = candidate.similarity, candidate.probability
    if similarity is None:
        return None
    if probability is not None:
        head_says_duplicate = probability >= candidate.cut
        if head_says_duplicate and similarity < candidate.gate:
            return PickReason.DISAGREEMENT, (probability - candidate.cut) + (candidate.gate - similarity)
        if not head_says_duplicate and similarity >= HEADLESS_THRESHOLD_FLOOR:
            return PickReason.DISAGREEMENT, (candidate.cut - probability) + (similarity - HEADLESS_THRESHOLD_FLOOR)
    distances = [abs(similarity - candidate.gate) / NEAR_GATE_MARGIN]
    if probability is not None:
        distances.append(abs(probability - candidate.cut) / NEAR_CUT_MARGIN)
    nearest = min(distances)
    if nearest <= 1.0:
        return PickReason.NEAR_GATE, 1.0 - nearest
    return None


def review_picks(*, candidates: Sequence[ReviewCandidate], quota: int) -> list[tuple[int, PickReason]]:
    """At most `quota` (event id, reason) in review order (see the module): the flagged ones in the order given
    (the caller passes them oldest suspicion first), then disagreements and near-gate picks in turns, the strongest
    of each first; ties go to the lower event id, so one set of candidates always gives one queue."""
    if quota <= 0:
        return []
    by_reason: dict[PickReason, list[tuple[float, int]]] = {reason: [] for reason in PickReason}
    flagged: list[int] = []
    for candidate in candidates:
        picked = pick_reason(candidate)
        if picked is None:
            continue
        reason, strength = picked
        if reason == PickReason.FLAGGED:
            flagged.append(candidate.event_id)
        else:
            by_reason[reason].append((-strength, candidate.event_id))
    picks = [(event_id, PickReason.FLAGGED) for event_id in flagged]
    disagreements = [(event_id, PickReason.DISAGREEMENT) for _, event_id in sorted(by_reason[PickReason.DISAGREEMENT])]
    near = [(event_id, PickReason.NEAR_GATE) for _, event_id in sorted(by_reason[PickReason.NEAR_GATE])]
    for pair in zip_longest(disagreements, near):
        picks.extend(pick for pick in pair if pick is not None)
    return picks[:quota]
