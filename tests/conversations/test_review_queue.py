"""The review queue's picking (pure): what is worth a person's minute, in which order, within the quota."""

from __future__ import annotations

import pytest

from conversations.review_queue import PickReason, ReviewCandidate, pick_reason, review_picks

CUT, GATE = 0.73, 0.76


def candidate(event_id: int, similarity: float | None, probability: float | None, flagged: bool = False):
    return ReviewCandidate(
        event_id=event_id, similarity=similarity, gate=GATE, probability=probability, cut=CUT, flagged=flagged
    )


@pytest.mark.parametrize(
    ("similarity", "probability", "flagged", "reason"),
    [
        (0.99, 0.99, True, PickReason.FLAGGED),
        (None, None, True, PickReason.FLAGGED),
        (0.70, 0.90, False, PickReason.DISAGREEMENT),  # head: duplicate; cosine under the gate
        (0.95, 0.20, False, PickReason.DISAGREEMENT),  # cosine alone would serve; head refuses
        (0.77, 0.20, False, PickReason.NEAR_GATE),  # cosine within 0.03 of the gate
        (0.74, 0.20, False, PickReason.NEAR_GATE),
        (0.85, 0.70, False, PickReason.NEAR_GATE),  # head within 0.10 of its cut
        (0.85, 0.95, False, None),  # both sure, agreeing: a served pair
        (0.40, 0.05, False, None),  # both sure it is not
        (0.85, None, False, None),  # no head, far from the gate
        (0.765, None, False, PickReason.NEAR_GATE),
        (None, None, False, None),  # nothing compared
    ],
)
def test_pick_reason(similarity, probability, flagged, reason):
    picked = pick_reason(candidate(1, similarity, probability, flagged))
    assert (picked[0] if picked else None) == reason


def test_flagged_first_then_disagreements_and_near_gate_in_turns_strongest_first_within_the_quota():
    candidates = [
        candidate(1, 0.77, 0.20),  # near gate, 0.01 away
        candidate(2, 0.95, 0.20),  # disagreement, weaker
        candidate(3, 0.99, 0.05),  # disagreement, stronger
        candidate(4, 0.76, 0.20),  # near gate, on it
        candidate(5, 0.85, 0.95),  # nothing to learn
        candidate(6, 0.85, 0.95, flagged=True),
        candidate(7, 0.90, 0.95, flagged=True),
        candidate(8, 0.745, 0.20),  # near gate, 0.015 away
    ]
    picks = review_picks(candidates=candidates, quota=10)
    assert picks == [
        (6, PickReason.FLAGGED),
        (7, PickReason.FLAGGED),
        (3, PickReason.DISAGREEMENT),
        (4, PickReason.NEAR_GATE),
        (2, PickReason.DISAGREEMENT),
        (1, PickReason.NEAR_GATE),
        (8, PickReason.NEAR_GATE),
    ]
    assert review_picks(candidates=candidates, quota=3) == picks[:3]
    assert review_picks(candidates=candidates, quota=0) == []
    assert review_picks(candidates=list(reversed(candidates)), quota=10)[2:] == picks[2:]


def test_ties_go_to_the_lower_event_id():
    picks = review_picks(candidates=[candidate(9, 0.76, 0.2), candidate(3, 0.76, 0.2)], quota=5)
    assert picks == [(3, PickReason.NEAR_GATE), (9, PickReason.NEAR_GATE)]
