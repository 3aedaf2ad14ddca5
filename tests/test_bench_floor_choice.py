"""bench/floor_choice.py: the rule that chooses the extractive answer's similarity floor from turns asked with none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# Loaded from its file: bench/ is not a package, and putting it on sys.path would let bench/conversations.py shadow the
# conversations app.
_SPEC = importlib.util.spec_from_file_location(
    "bench_floor_choice", Path(__file__).resolve().parent.parent / "bench" / "floor_choice.py"
)
floor_choice = sys.modules.setdefault("bench_floor_choice", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(floor_choice)


def _half_zero(count: int, start: int = 0) -> list[str]:
    """`count` distinct questions that fall in half 0."""
    questions, number = [], start
    while len(questions) < count:
        question = f"question {number}"
        if floor_choice.half_of(question) == 0:
            questions.append(question)
        number += 1
    return questions


def test_a_turn_answers_nothing_under_a_floor_when_it_did_already_or_its_nearest_passage_is_under_it():
    questions = _half_zero(4)
    turns = [
        (questions[0], True, None),
        (questions[1], False, 0.2),
        (questions[2], False, 0.5),
        (questions[3], False, None),
    ]
    assert floor_choice.share_answered_nothing(turns, floor=None, half=0) == 0.25
    assert floor_choice.share_answered_nothing(turns, floor=0.3, half=0) == 0.5
    assert floor_choice.share_answered_nothing(turns, floor=0.6, half=0) == 0.75  # a turn showing nothing has no cosine
    assert floor_choice.share_answered_nothing(turns, floor=0.6, half=1) == 0.0  # none of them is in half 1


def test_the_floor_chosen_is_the_highest_within_the_cost_on_its_half_alone():
    # 100 covered turns of half 0, their nearest passages at 0.01 steps from 0.20: a floor of f costs (f - 0.20) * 100
    # turns, so a cost of 2 in 100 allows 0.22 and no step above it.
    questions = _half_zero(100)
    covered = [(question, False, round(0.20 + 0.01 * index, 2)) for index, question in enumerate(questions)]
    floors = (0.20, 0.21, 0.22, 0.23, 0.30)
    assert floor_choice.floor_chosen(covered, floors=floors, cost=0.02) == 0.22
    assert floor_choice.floor_chosen(covered, floors=floors, cost=0.0) == 0.20
    # Turns of the other half, however near their passages, do not move it.
    others = [(f"other {n}", False, 0.0) for n in range(400) if floor_choice.half_of(f"other {n}") == 1]
    assert floor_choice.floor_chosen(covered + others, floors=floors, cost=0.02) == 0.22
    assert floor_choice.floor_chosen(covered, floors=(0.5,), cost=0.02) is None
