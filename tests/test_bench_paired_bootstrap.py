"""bench/paired_bootstrap.py: the interval the MTRAG bench prints for a mode's novel recall against semantic's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# Loaded from its file: bench/ is not a package, and putting it on sys.path would let bench/conversations.py shadow the
# conversations app.
_SPEC = importlib.util.spec_from_file_location(
    "bench_paired_bootstrap", Path(__file__).resolve().parent.parent / "bench" / "paired_bootstrap.py"
)
paired_bootstrap_module = sys.modules.setdefault("bench_paired_bootstrap", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(paired_bootstrap_module)
paired_bootstrap = paired_bootstrap_module.paired_bootstrap
records_paired = paired_bootstrap_module.records_paired


def test_identical_runs_differ_by_nothing_in_every_draw():
    values = {turn: (turn % 3) / 2 for turn in range(60)}
    interval = paired_bootstrap(base=values, other=dict(values), resamples=500)
    assert (interval.difference, interval.low, interval.high, interval.units) == (0.0, 0.0, 0.0, 60)


def test_a_constant_gain_on_every_turn_is_the_whole_interval():
    base = {turn: 0.25 for turn in range(40)}
    other = {turn: 0.75 for turn in range(40)}
    interval = paired_bootstrap(base=base, other=other, resamples=500)
    assert interval.difference == pytest.approx(0.5)
    assert interval.low == pytest.approx(0.5) and interval.high == pytest.approx(0.5)


def test_the_interval_holds_the_observed_difference_and_narrows_with_more_turns():
    def runs(turns: int) -> tuple[dict, dict]:
        # One turn in four gained, one in four lost, the rest level: a difference of zero with real spread.
        base = {turn: 0.5 for turn in range(turns)}
        other = {turn: 0.5 + (0.5 if turn % 4 == 0 else -0.5 if turn % 4 == 1 else 0.0) for turn in range(turns)}
        return base, other

    few = paired_bootstrap(base=runs(40)[0], other=runs(40)[1], resamples=2000)
    many = paired_bootstrap(base=runs(400)[0], other=runs(400)[1], resamples=2000)
    assert few.low < few.difference == 0.0 < few.high
    assert many.low < 0.0 < many.high
    assert many.high - many.low < few.high - few.low


def test_turns_without_a_value_count_in_neither_mean_and_may_differ_between_runs():
    base = {0: 1.0, 1: None, 2: 0.0}
    other = {0: None, 1: 1.0, 2: 0.0}
    # Means over the turns with a value: base (1 + 0) / 2, other (1 + 0) / 2.
    assert paired_bootstrap(base=base, other=other, resamples=200).difference == 0.0


def test_resampling_by_conversation_keeps_its_turns_together_and_is_wider_when_they_move_together():
    # Each conversation is all gains or all losses: drawn by turn it looks like many independent turns.
    base, other, conversation_of = {}, {}, {}
    for conversation in range(10):
        for turn in range(8):
            key = (conversation, turn)
            base[key], other[key] = 0.5, (1.0 if conversation % 2 else 0.0)
            conversation_of[key] = conversation
    by_turn = paired_bootstrap(base=base, other=other, resamples=4000)
    by_conversation = paired_bootstrap(base=base, other=other, unit_of=conversation_of, resamples=4000)
    assert by_conversation.units == 10 and by_turn.units == 80
    assert by_conversation.high - by_conversation.low > 1.5 * (by_turn.high - by_turn.low)


def test_the_same_seed_gives_the_same_interval():
    base = {turn: float(turn % 2) for turn in range(30)}
    other = {turn: float(turn % 3 == 0) for turn in range(30)}
    assert paired_bootstrap(base=base, other=other, seed=7) == paired_bootstrap(base=base, other=other, seed=7)


def test_runs_of_other_turns_and_a_run_without_values_are_refused():
    with pytest.raises(ValueError, match="same turns"):
        paired_bootstrap(base={0: 1.0}, other={1: 1.0})
    with pytest.raises(ValueError, match="no turn with a value"):
        paired_bootstrap(base={0: None}, other={0: 1.0})


def test_records_of_two_replays_are_paired_by_conversation_and_turn():
    first = [{"conversation": 0, "turn": 0, "novel_recall": 1.0}, {"conversation": 1, "turn": 0, "novel_recall": None}]
    second = [{"conversation": 1, "turn": 0, "novel_recall": 0.5}, {"conversation": 0, "turn": 0, "novel_recall": 0.0}]
    base, other, conversation_of = records_paired(first, second)
    assert base == {(0, 0): 1.0, (1, 0): None}
    assert other == {(0, 0): 0.0, (1, 0): 0.5}
    assert conversation_of == {(0, 0): 0, (1, 0): 1}
