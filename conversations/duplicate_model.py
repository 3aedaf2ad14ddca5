"""The shipped duplicate heads' weights, one per embedding model that has one (`SHIPPED_HEADS`), each read once per
process from its file beside this module: `duplicate_model.json` reads the bundled all-MiniLM-L6-v2's vectors,
`duplicate_model.use-multilingual-v3.json` those of the multilingual model.

The files are written by `manage.py duplicate_head_train` (`conversations.duplicate_head_training`: logistic
regression on pair features of the model's vectors, trained on the train split of public labelled pairs: QQP for the
bundled model, QQP with AFQMC and LCQMC for the multilingual one). Each carries what it was trained on and the
held-out figures, so a reader of the file knows what its cut promises. Everything that uses the weights is a pure
function in `conversations.decisions`; this module is the only one that reads the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from retrieval.embeddings import BUNDLED_MODEL_NAME, USE_MODEL_NAME

HEADS_DIR = Path(__file__).resolve().parent
# The bundled model's head; also what `pair_model_default` gives for a model without a head of its own.
MODEL_PATH = HEADS_DIR / "duplicate_model.json"
# The shipped heads, by the name of the embedding model whose vectors each reads (`retrieval.embeddings.model_name`).
# A model not named here has no head: its decisions run without one, on a raised cosine gate (`decisions.head_applies`).
SHIPPED_HEADS = {
    BUNDLED_MODEL_NAME: MODEL_PATH,
    USE_MODEL_NAME: HEADS_DIR / f"duplicate_model.{USE_MODEL_NAME}.json",
}
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


def head_path(embedding_model: str | None = None) -> Path:
    """The file of the shipped head of `embedding_model` (by name): its own in SHIPPED_HEADS, else (None, or a model
    without a head) the bundled model's."""
    return SHIPPED_HEADS.get(embedding_model or BUNDLED_MODEL_NAME, MODEL_PATH)


def pair_model_default(embedding_model: str | None = None) -> PairModel:
    """The shipped head of `embedding_model` (by name; None: the bundled model's), read on first use and kept for the
    life of the process. A model without a head of its own gets the bundled model's, which names the model it was
    trained on (`meta["embedding_model"]`), so `decisions.head_applies` refuses it for any other: that model's
    decisions run without a head."""
    return _head_at(head_path(embedding_model))


@lru_cache(maxsize=len(SHIPPED_HEADS))
def _head_at(path: Path) -> PairModel:
    return pair_model_load(path)
