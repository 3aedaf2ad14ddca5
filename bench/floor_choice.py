"""How `bench/answer_floor.py --without-floor` chooses an answer's similarity floor from turns asked with none: pure
functions, so the rule is tested apart from the run.

A turn is (question, answered nothing with no floor, its nearest shown passage's cosine or None when it showed none).
Under a floor it answers nothing when it did already or its nearest passage is under the floor. Every row is split in
two by a hash of the question: the floor is chosen on one half of the covered turns and judged on the other half and
on every other row."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

Turn = tuple[str, bool, float | None]

# The floors tried: the cosine of a question to the nearest passage shown, in steps of 0.025.
FLOORS = tuple(round(0.15 + 0.025 * step, 3) for step in range(15))
# How many more covered turns (a share of them) a floor may answer nothing, on the half it is chosen on.
COVERED_COST = 0.02


def half_of(question: str) -> int:
    """0 or 1, the same for a question in every run."""
    return zlib.crc32(question.encode()) % 2


def share_answered_nothing(turns: Sequence[Turn], *, floor: float | None, half: int) -> float:
    """The share of `turns` of `half` answered nothing under `floor` (None: no floor)."""
    chosen = [turn for turn in turns if half_of(turn[0]) == half]
    nothing = [turn for turn in chosen if turn[1] or (floor is not None and turn[2] is not None and turn[2] < floor)]
    return len(nothing) / max(1, len(chosen))


def floor_chosen(
    covered: Sequence[Turn], *, floors: Sequence[float] = FLOORS, cost: float = COVERED_COST, half: int = 0
) -> float | None:
    """The highest of `floors` under which at most `cost` more of the `covered` turns of `half` answer nothing than
    with none; None when even the lowest costs more."""
    base = share_answered_nothing(covered, floor=None, half=half)
    within = [floor for floor in floors if share_answered_nothing(covered, floor=floor, half=half) - base <= cost]
    return max(within, default=None)
