"""A paired bootstrap of the difference between two replays of the same turns: is a gap in a mean recall noise?

Two runs of `bench/conversations.py` replay the same conversations, turn for turn, so a turn of one run is paired with
the same turn of the other. A figure such as novel recall@5 is the mean over the turns that have a value (a turn
without a novel relevant passage has none, and which turns have one can differ between runs, since what a run showed
earlier decides what is novel later). Each resample draws units with replacement, the same draw for both runs, and
takes the difference of the two means over the turns drawn: by turn (the units are turns) or by conversation (whole
conversations, which keeps what one turn does to the next inside its unit, so it is the wider and safer interval).
Pure: numpy only, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedInterval:
    """`difference` = other's mean - base's mean over the paired turns, and its bootstrap interval."""

    difference: float
    low: float
    high: float
    units: int  # turns or conversations resampled


def paired_bootstrap(
    *,
    base: Mapping[Hashable, float | None],
    other: Mapping[Hashable, float | None],
    unit_of: Mapping[Hashable, Hashable] | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> PairedInterval:
    """The bootstrap interval (percentile, `confidence`) of mean(other) - mean(base), each mean over the turns of the
    draw that have a value (None: no value). `base` and `other` map the same turn keys to a value or None; keys in
    one only are a ValueError. `unit_of` maps each turn key to the unit drawn (its conversation); without it each
    turn is its own unit. A draw in which either run has no value at all is left out of the interval."""
    if set(base) != set(other):
        raise ValueError("the two runs do not hold the same turns")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence is a share between 0 and 1")
    keys = sorted(base, key=repr)
    units = sorted({(unit_of[key] if unit_of is not None else key) for key in keys}, key=repr)
    index_of = {unit: index for index, unit in enumerate(units)}
    # Per unit: the sum of its turns' values and how many have one, per run; a draw's mean is sum(sums) / sum(counts).
    sums = np.zeros((2, len(units)))
    counts = np.zeros((2, len(units)))
    for key in keys:
        unit = index_of[unit_of[key] if unit_of is not None else key]
        for run, values in enumerate((base, other)):
            if values[key] is not None:
                sums[run, unit] += float(values[key])
                counts[run, unit] += 1
    if not counts[0].sum() or not counts[1].sum():
        raise ValueError("a run has no turn with a value")
    observed = sums[1].sum() / counts[1].sum() - sums[0].sum() / counts[0].sum()
    draws = np.random.default_rng(seed).integers(0, len(units), size=(resamples, len(units)))
    drawn_counts = counts[:, draws].sum(axis=2)  # (run, resample)
    valid = (drawn_counts > 0).all(axis=0)
    means = sums[:, draws].sum(axis=2)[:, valid] / drawn_counts[:, valid]
    differences = means[1] - means[0]
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(differences, [tail, 1.0 - tail])
    return PairedInterval(difference=float(observed), low=float(low), high=float(high), units=len(units))


def records_paired(
    base: Sequence[Mapping], other: Sequence[Mapping], *, field: str = "novel_recall"
) -> tuple[dict, dict, dict]:
    """(base values, other values, conversation of each turn) of two replays' turn records (`bench/conversations.py`
    `replay`), keyed by (conversation, turn): the arguments of `paired_bootstrap`. Pure."""

    def by_turn(records: Sequence[Mapping]) -> dict:
        return {(record["conversation"], record["turn"]): record[field] for record in records}

    base_values, other_values = by_turn(base), by_turn(other)
    return base_values, other_values, {key: key[0] for key in base_values}
