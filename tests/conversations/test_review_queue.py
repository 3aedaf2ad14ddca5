"""The review queue's picking (pure): what is worth a person's minute, in which order, within the quota, and the
random share that samples the traffic with a known chance; then the day's draw as stored and the labels it gives."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest

from conversations.admin.services import dedup_events_review
from conversations.models import DedupAction, ReviewPick
from conversations.review.review_queue import review_queue_of_day
from conversations.review.review_queue_rules import (
    PickReason,
    RandomDraw,
    ReviewCandidate,
    pick_reason,
    random_inclusion_probability,
    random_quota,
    review_picks,
)
from conversations.selectors import duplicate_labels_training
from retrieval.embeddings import BUNDLED_MODEL_NAME
from tests.factories import DedupEventFactory, TurnFactory

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
        (6, PickReason.FLAGGED, 1.0),
        (7, PickReason.FLAGGED, 1.0),
        (3, PickReason.DISAGREEMENT, 1.0),
        (4, PickReason.NEAR_GATE, 1.0),
        (2, PickReason.DISAGREEMENT, 1.0),
        (1, PickReason.NEAR_GATE, 1.0),
        (8, PickReason.NEAR_GATE, 1.0),
    ]
    assert review_picks(candidates=candidates, quota=3) == picks[:3]
    assert review_picks(candidates=candidates, quota=0) == []
    assert review_picks(candidates=list(reversed(candidates)), quota=10)[2:] == picks[2:]


def test_ties_go_to_the_lower_event_id():
    picks = review_picks(candidates=[candidate(9, 0.76, 0.2), candidate(3, 0.76, 0.2)], quota=5)
    assert picks == [(3, PickReason.NEAR_GATE, 1.0), (9, PickReason.NEAR_GATE, 1.0)]


# --- the random share (pure) ---------------------------------------------------------------------------------------


def traffic(near: int, plain: int, *, flagged: int = 0) -> list[ReviewCandidate]:
    """`flagged` flagged decisions, `near` near the gate and `plain` both sure and agreeing (nothing to learn)."""
    return (
        [candidate(1000 + i, 0.95, 0.95, flagged=True) for i in range(flagged)]
        + [candidate(i, 0.76 + 0.0005 * i, 0.20) for i in range(1, near + 1)]
        + [candidate(500 + i, 0.85, 0.95) for i in range(plain)]
    )


@pytest.mark.parametrize(
    ("quota", "share", "flagged", "owed"),
    [(20, 0.25, 0, 5), (20, 0.25, 17, 3), (20, 0.25, 25, 0), (2, 0.25, 0, 0), (10, 0.3, 0, 3), (100, 0.29, 0, 29)],
)
def test_the_random_share_is_the_share_rounded_down_and_never_a_flagged_place(quota, share, flagged, owed):
    assert random_quota(quota=quota, random_share=share, flagged=flagged) == owed


def test_a_quarter_of_the_quota_is_drawn_from_what_the_rules_left_with_its_probability():
    candidates = traffic(near=30, plain=70)
    picks = review_picks(candidates=candidates, quota=20, random_share=0.25, rng=random.Random(1))
    assert len(picks) == 20 and len({p.event_id for p in picks}) == 20
    rules = [p for p in picks if p.reason != PickReason.RANDOM]
    drawn = [p for p in picks if p.reason == PickReason.RANDOM]
    # The rules' 15 are their strongest, as without a share; the 5 drawn come from the 85 they left, any of them.
    assert rules == review_picks(candidates=candidates, quota=15)
    assert len(drawn) == 5 and all(p.probability == pytest.approx(5 / 85) for p in drawn)
    assert all(p.probability == 1.0 for p in rules)
    # Spread among the rules' picks, not left at the end, where a reviewer who stops part way would never reach them.
    positions = [i for i, p in enumerate(picks) if p.reason == PickReason.RANDOM]
    assert positions[0] < 5 and positions[-1] >= 15


def test_the_rules_leftover_is_drawn_at_random_and_without_a_share_nothing_is():
    candidates = traffic(near=3, plain=50)
    picks = review_picks(candidates=candidates, quota=20, random_share=0.25, rng=random.Random(1))
    assert Counter(p.reason for p in picks) == {PickReason.NEAR_GATE: 3, PickReason.RANDOM: 17}
    assert [p.probability for p in picks if p.reason == PickReason.RANDOM] == [17 / 50] * 17
    assert review_picks(candidates=candidates, quota=20) == review_picks(candidates=candidates, quota=20, rng=None)
    assert all(p.reason == PickReason.NEAR_GATE for p in review_picks(candidates=candidates, quota=20))
    with pytest.raises(ValueError, match="seeded"):
        review_picks(candidates=candidates, quota=20, random_share=0.25)


def test_one_seed_and_one_set_of_candidates_give_one_draw_whatever_their_order():
    candidates = traffic(near=10, plain=200)
    first = review_picks(candidates=candidates, quota=20, random_share=0.25, rng=random.Random("t1:2026-12-01"))
    again = review_picks(
        candidates=list(reversed(candidates)), quota=20, random_share=0.25, rng=random.Random("t1:2026-12-01")
    )
    other_day = review_picks(candidates=candidates, quota=20, random_share=0.25, rng=random.Random("t1:2026-12-02"))
    assert first == again
    assert {p.event_id for p in first if p.reason == PickReason.RANDOM} != {
        p.event_id for p in other_day if p.reason == PickReason.RANDOM
    }


def test_each_candidate_the_rules_left_is_drawn_as_often_as_its_stated_probability():
    candidates = traffic(near=4, plain=16)  # the rules take 4 of 8; 4 are drawn from the 16 left: p = 0.25
    counts: Counter = Counter()
    draws = 4000
    for seed in range(draws):
        picks = review_picks(candidates=candidates, quota=8, random_share=0.5, rng=random.Random(seed))
        assert {p.probability for p in picks if p.reason == PickReason.RANDOM} == {0.25}
        counts.update(p.event_id for p in picks if p.reason == PickReason.RANDOM)
    assert set(counts) == {500 + i for i in range(16)}
    # Binomial(4000, 0.25): standard deviation 27, so 0.25 +- 0.03 holds every candidate by over four of them.
    assert all(abs(count / draws - 0.25) < 0.03 for count in counts.values())


def test_flagged_picks_come_first_and_take_the_random_share_when_they_need_it():
    candidates = traffic(near=10, plain=50, flagged=6)
    picks = review_picks(candidates=candidates, quota=8, random_share=0.5, rng=random.Random(3))
    assert [p.reason for p in picks[:6]] == [PickReason.FLAGGED] * 6
    assert Counter(p.reason for p in picks[6:]) == {PickReason.RANDOM: 2}
    assert [p.event_id for p in picks[:6]] == [1000 + i for i in range(6)]  # in the order given
    only_flagged = review_picks(candidates=candidates, quota=5, random_share=0.5, rng=random.Random(3))
    assert [p.reason for p in only_flagged] == [PickReason.FLAGGED] * 5


# --- the day's draw, stored, and the labels it gives ---------------------------------------------------------------


def labelable_event(tenant, *, similarity: float, probability: float | None = None):
    matched = TurnFactory(tenant=tenant, question=f"Stored question {similarity}")
    turn = TurnFactory(tenant=tenant, conversation=matched.conversation, question=f"Asked question {similarity}")
    return DedupEventFactory(
        tenant=tenant,
        turn=turn,
        action=DedupAction.SERVED_CACHED,
        matched_turn=matched,
        matched_turn_ref=matched.pk,
        similarity=similarity,
        threshold=0.76,
        pair_probability=probability,
    )


@pytest.mark.django_db
def test_the_days_draw_stores_each_picks_probability_and_is_the_same_when_drawn_again(tenant, other_tenant):
    near = [labelable_event(tenant, similarity=0.76 + 0.001 * i) for i in range(6)]
    plain = [labelable_event(tenant, similarity=0.40 + 0.001 * i) for i in range(30)]
    flagged = labelable_event(tenant, similarity=0.99)
    flagged.suspected_false_hit = True
    flagged.save()
    labelable_event(other_tenant, similarity=0.40)
    day = date(2026, 12, 1)

    picks = review_queue_of_day(tenant=tenant, day=day, quota=8, random_share=0.25)
    assert [p.rank for p in picks] == list(range(1, 9))
    assert picks[0].dedup_event_id == flagged.pk and picks[0].reason == "flagged"
    by_reason = Counter(p.reason for p in picks)
    assert by_reason == {"flagged": 1, "near_gate": 5, "random": 2}
    # The rules left 1 near-gate decision and the 30 plain ones: 2 drawn of 31.
    assert [p.inclusion_probability for p in picks if p.reason == "random"] == pytest.approx([2 / 31] * 2)
    assert {p.inclusion_probability for p in picks if p.reason != "random"} == {1.0}
    assert {p.dedup_event_id for p in picks} <= {e.pk for e in [*near, *plain, flagged]}
    assert not ReviewPick.objects.for_tenant(other_tenant).exists()

    drawn = [(p.dedup_event_id, p.reason, p.inclusion_probability) for p in picks]
    ReviewPick.objects.for_tenant(tenant).filter(day=day).delete()
    again = review_queue_of_day(tenant=tenant, day=day, quota=8, random_share=0.25)
    assert [(p.dedup_event_id, p.reason, p.inclusion_probability) for p in again] == drawn


@pytest.mark.django_db
def test_labels_carry_their_picks_reason_and_probability(tenant):
    events = [labelable_event(tenant, similarity=0.40 + 0.01 * i) for i in range(4)]
    near = labelable_event(tenant, similarity=0.765)
    outside = labelable_event(tenant, similarity=0.30)  # reviewed from the audit log, never picked
    picks = review_queue_of_day(tenant=tenant, day=date(2026, 12, 1), quota=3, random_share=0.5)
    picked = {p.dedup_event_id: p for p in picks}
    assert picked[near.pk].reason == "near_gate"
    assert outside.pk not in picked or picked[outside.pk].reason == "random"
    reviewed = [*picked, *([outside.pk] if outside.pk not in picked else [])]
    dedup_events_review(tenant=tenant, event_ids=reviewed, user=None, actor="support", verdict="correct")

    pairs = {
        pair.question: pair for pair in duplicate_labels_training(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    }
    by_event = {e.pk: e.turn.question for e in [*events, near, outside]}
    for event_id, pick in picked.items():
        pair = pairs[by_event[event_id]]
        assert (pair.pick_reason, pair.pick_probability) == (pick.reason, pick.inclusion_probability)
        expected = 1 / pick.inclusion_probability if pick.reason == "random" else 0.0
        assert pair.random_pick_weight == pytest.approx(expected)
    assert any(pair.random_pick_weight > 0 for pair in pairs.values())
    if outside.pk not in picked:
        label = pairs[outside.turn.question]
        assert (label.pick_reason, label.pick_probability, label.random_pick_weight) == ("", None, 0.0)


def test_a_decisions_random_chance_is_that_of_every_draw_it_was_a_candidate_of():
    made = datetime(2026, 12, 1, 9, tzinfo=UTC)
    draws = [
        RandomDraw(made - timedelta(hours=1), 0.9),  # before it was made
        RandomDraw(made + timedelta(hours=1), 0.1),
        RandomDraw(made + timedelta(days=1), 0.5),
        RandomDraw(made + timedelta(days=8), 0.5),  # past the lookback: no longer a candidate
    ]
    chance = random_inclusion_probability(created_at=made, draws=draws, lookback=timedelta(days=7))
    assert chance == pytest.approx(1 - 0.9 * 0.5)
    assert random_inclusion_probability(created_at=made, draws=draws[:1], lookback=timedelta(days=7)) == 0.0


@pytest.mark.django_db
def test_a_random_picks_weight_counts_the_later_draws_that_could_have_picked_it_too(tenant):
    events = [labelable_event(tenant, similarity=0.40 + 0.001 * i) for i in range(12)]
    first = review_queue_of_day(tenant=tenant, day=date(2026, 12, 1), quota=2, random_share=1.0)
    second = review_queue_of_day(tenant=tenant, day=date(2026, 12, 2), quota=2, random_share=1.0)
    assert [p.inclusion_probability for p in first] == pytest.approx([2 / 12] * 2)
    assert [p.inclusion_probability for p in second] == pytest.approx([2 / 10] * 2)
    picked = [p.dedup_event_id for p in [*first, *second]]
    dedup_events_review(tenant=tenant, event_ids=picked, user=None, actor="support", verdict="correct")

    pairs = duplicate_labels_training(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    assert len(pairs) == 4 and {e.pk for e in events} >= set(picked)
    # Each of the twelve was a candidate of both draws: the first day's picks stand for as many decisions as the
    # second's, not 6 against 5.
    chance = 1 - (1 - 2 / 12) * (1 - 2 / 10)
    assert [pair.pick_probability for pair in pairs] == pytest.approx([chance] * 4)
    assert [pair.random_pick_weight for pair in pairs] == pytest.approx([1 / chance] * 4)


def test_each_decision_is_read_against_the_cut_of_its_own_models_head():
    """A turn's probability came from the head of the model that embedded its question: the queue reads it against
    that head's cut, by the model id the turn records."""
    from conversations.dedup.duplicate_model import pair_model_default
    from conversations.review.review_queue import head_cuts
    from retrieval.embeddings import model_id, offered_models

    cuts = head_cuts()
    assert cuts == {model_id(name): pair_model_default(name).cut for name in offered_models()}
    assert len(set(cuts.values())) == len(offered_models())  # each model's head has a cut of its own
