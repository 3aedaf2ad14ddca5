"""The duplicate head's weights: read once per process from `duplicate_model.json` beside this module.

The file is written by `manage.py duplicate_head_train` (`conversations.duplicate_head_training`: logistic
regression on pair features of the bundled all-MiniLM-L6-v2 vectors, trained on the train split of
../shared/data/qqp). It carries what it was trained on and the held-out figures, so a reader of the file knows what
its cut promises. Everything that uses the weights is a pure function in `conversations.decisions`; this module is
the only one that reads the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

MODEL_PATH = Path(__file__).resolve().parent / "duplicate_model.json"
# The feature sets `question_pairs.pair_features` computes: the shipped head's, and the tenant verifiers', which is
# the same features followed by `question_pairs.PAIR_V2_FEATURES`. A file of another version is refused, never misread.
FEATURE_VERSION = "pair-v1"
TENANT_FEATURE_VERSION = "pair-v2"
FEATURE_VERSIONS = (FEATURE_VERSION, TENANT_FEATURE_VERSION)


@dataclass(frozen=True, eq=False)
class PairModel:
    """Logistic regression on standardised pair features: p = sigmoid(weights . (x - mean) / scale + bias)."""

    weights: np.ndarray
    bias: float
    mean: np.ndarray
    scale: np.ndarray
    cut: float  # probability at or above which a pair counts as a duplicate (chosen on the train split)
    dimension: int  # embedding size the vector features assume
    meta: dict = field(default_factory=dict)
    feature_version: str = FEATURE_VERSION  # which `question_pairs.pair_features` set the weights read


def pair_model_from_dict(payload: dict) -> PairModel:
    if payload.get("feature_version") not in FEATURE_VERSIONS:
        raise ValueError(
            f"duplicate model of feature set {payload.get('feature_version')!r}, expected one of {FEATURE_VERSIONS}"
        )
    weights = np.asarray(payload["weights"], dtype=np.float64)
    mean = np.asarray(payload["mean"], dtype=np.float64)
    scale = np.asarray(payload["scale"], dtype=np.float64)
    if not (weights.shape == mean.shape == scale.shape) or weights.ndim != 1:
        raise ValueError("duplicate model weights, mean and scale must be vectors of one length")
    from conversations.question_pairs import pair_feature_count  # it imports this module for PairModel

    expected = pair_feature_count(int(payload["dimension"]), feature_version=str(payload["feature_version"]))
    if weights.shape[0] != expected:
        # A file whose weights do not match its feature set would fail every turn it scored: refused at load.
        raise ValueError(f"duplicate model has {weights.shape[0]} weights, its feature set needs {expected}")
    meta = {k: v for k, v in payload.items() if k not in ("weights", "mean", "scale", "bias", "cut", "dimension")}
    return PairModel(
        weights=weights,
        bias=float(payload["bias"]),
        mean=mean,
        scale=scale,
        cut=float(payload["cut"]),
        dimension=int(payload["dimension"]),
        meta=meta,
        feature_version=str(payload["feature_version"]),
    )


def pair_model_load(path: Path = MODEL_PATH) -> PairModel:
    return pair_model_from_dict(json.loads(path.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def pair_model_default() -> PairModel:
    """The shipped model, read on first use and kept for the life of the process."""
    return pair_model_load(MODEL_PATH)
