"""The pair reader beside a shipped duplicate head: a cross-encoder that reads the two questions together
(`retrieval.cross_encoder`, adapters fitted by `manage.py pair_reader_train`), whose score joins the head's.

The head judges a pair from the two vectors and a few word counts; the reader reads the words of both questions in
one pass, each word beside the other question's (it does not read word order better: on PAWS-QQP's swapped words it
changes nothing). Neither alone decides: the decision's probability is a logistic combination of the head's
regression's log-odds (a tree head's trees stand aside: the reader was fitted beside its regression) and the reader's
score (`combined_probability`, two weights fitted on scores neither part saw), and the pair is
served at or above the reader's own cut. A head file carries its reader as a `reader` block (weights, scaling, cut,
the adapters file's name and SHA-256, and the figures its cut promises); a head without one decides alone, as
tenants' verifiers do.

The reader is the operator's choice (KB_PAIR_READER, off by default; `reader_on`): fitted on QQP, it gains precision
on QQP-like traffic at the same recall and serves fewer repeats of help-centre phrasing written here
(docs/conversations.md, "The pair reader beside the head"). Off, every decision is the head's alone, as before.

If the reader cannot run (its file is missing or altered, the export cannot be made), the head decides alone at its
own cut, as it did before the reader existed, and the log says so once per process: a safe fallback, not a wrong
answer. A run that raises while scoring leaves that call to the head alone the same way (logged once), and the next
call tries the reader again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.conf import settings

from retrieval.cross_encoder import CrossEncoderUnavailable, pair_scorer

logger = logging.getLogger(__name__)

HEADS_DIR = Path(__file__).resolve().parent
READER_FILE = "pair_reader.all-MiniLM-L6-v2.npz"
_unavailable: set[Path] = set()
# Readers whose run has failed at least once in this process: said in the log once, not on every turn.
_run_failed: set[Path] = set()


@dataclass(frozen=True, eq=False)
class PairReader:
    """p = sigmoid(weights . ((head log-odds, reader score) - mean) / scale + bias), served at p >= cut."""

    adapters: Path
    adapters_sha256: str
    weights: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    bias: float
    cut: float
    meta: dict = field(default_factory=dict)


def reader_on() -> bool:
    """Whether shipped heads decide with their readers in this deployment (KB_PAIR_READER, off by default)."""
    return bool(settings.PAIR_READER)


def pair_reader_from_dict(payload: dict, *, directory: Path = HEADS_DIR) -> PairReader:
    """The reader of a head file's `reader` block; its adapters file is named relative to `directory`."""
    arrays = [np.asarray(payload[key], dtype=np.float64) for key in ("weights", "mean", "scale")]
    if any(a.shape != (2,) for a in arrays) or not all(np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("a pair reader's weights, mean and scale are two finite numbers each")
    if not np.all(arrays[2] > 0):
        raise ValueError("a pair reader's scale is positive")
    kept = ("weights", "mean", "scale", "bias", "cut", "adapters", "adapters_sha256")
    return PairReader(
        adapters=directory / str(payload["adapters"]),
        adapters_sha256=str(payload["adapters_sha256"]),
        weights=arrays[0],
        mean=arrays[1],
        scale=arrays[2],
        bias=float(payload["bias"]),
        cut=float(payload["cut"]),
        meta={k: v for k, v in payload.items() if k not in kept},
    )


def combined_probability(*, reader: PairReader, head_probability: float, reader_score: float) -> float:
    """The decision's probability from the head's probability and the reader's score. Pure."""
    clipped = min(max(head_probability, 1e-7), 1 - 1e-7)
    inputs = np.array([math.log(clipped / (1 - clipped)), reader_score])
    z = float(((inputs - reader.mean) / reader.scale) @ reader.weights) + reader.bias
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def reader_score(*, reader: PairReader, question: str, stored: str) -> float | None:
    """The reader's score of the pair (either order gives the same), or None when the reader cannot run in this
    process (said once in the log): the head then decides alone."""
    scores = reader_scores(reader=reader, pairs=[(question, stored)])
    return None if scores is None else float(scores[0])


def reader_scores(*, reader: PairReader, pairs: Sequence[tuple[str, str]]) -> np.ndarray | None:
    """The reader's score of each pair, or None when the reader cannot run in this process (said once in the log)."""
    if reader.adapters in _unavailable:
        return None
    try:
        scorer = pair_scorer(adapters=reader.adapters, sha256=reader.adapters_sha256)
    except CrossEncoderUnavailable as exc:
        _unavailable.add(reader.adapters)
        logger.error("The pair reader cannot run, so the duplicate head decides alone at its own cut: %s", exc)
        return None
    try:
        return scorer.scores(pairs)
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime and PyTorch raise untyped run errors (memory, a bad input)
        # A run that fails is one turn's problem, not the reader's: this call falls back to the head alone and the
        # next one tries again. The turn must not end in an error for a signal the head can do without.
        if reader.adapters not in _run_failed:
            _run_failed.add(reader.adapters)
            logger.error("The pair reader failed while scoring, so the duplicate head decides alone: %r", exc)
        return None
