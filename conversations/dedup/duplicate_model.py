"""The shipped duplicate heads' weights, one per embedding model that has one (`SHIPPED_HEADS`), each read once per
process from its file beside this module: `duplicate_model.json` reads the bundled all-MiniLM-L6-v2's vectors,
`duplicate_model.use-multilingual-v3.json` those of the multilingual model.

The files are written by `manage.py duplicate_head_train` (`conversations.training.duplicate_head_training`: logistic
regression on pair features of the model's vectors, trained on the train split of public labelled pairs: QQP for the
bundled model, QQP with AFQMC and LCQMC for the multilingual one; the bundled model's with boosted trees over that
regression, `--trees`). Each carries what it was trained on and the
held-out figures, so a reader of the file knows what its cut promises. The bundled model's head also carries its pair
reader's block (`pair_reader`, written by `manage.py pair_reader_train`). Everything that uses the weights is a pure
function in `conversations.dedup.decisions`; this module is the only one that reads the files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from conversations.dedup.pair_features import (
    FEATURE_VERSION,
    FEATURE_VERSIONS,
    pair_feature_count,
)
from conversations.dedup.pair_reader import PairReader, pair_reader_from_dict, reader_on
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
# The kinds of head a file may hold (its "kind_of_head"; none is a regression): a logistic regression, or boosted
# trees on a logistic regression's log-odds and the pair's text features (`TreeEnsemble`): a tenant's verifier may be
# either, and so may a shipped head (`manage.py duplicate_head_train --trees`).
LINEAR_KIND = "linear"
TREES_KIND = "trees"


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Boosted regression trees in flat arrays, one entry per node of every tree: a split node sends a row whose
    value of `feature` is at or below `threshold` to `left`, else to `right` (node indices in the arrays); a leaf
    holds its `value`. `roots` holds each tree's first node. The log-odds are `baseline` plus each tree's leaf value.
    Every pair feature is finite, so there is no missing-value branch."""

    baseline: float
    roots: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    leaf: np.ndarray
    inputs: int  # how many values a row has

    def raw(self, row: np.ndarray) -> float:
        """The log-odds of one row: every tree walked at once, a level a step (a turn scores its candidates with
        this, so it is one array operation per level rather than one Python step per node), the leaves summed
        exactly (`math.fsum`), so the result does not depend on the order of the trees."""
        nodes = self.roots
        inner = ~self.leaf[nodes]
        while inner.any():
            below = row[self.feature[nodes]] <= self.threshold[nodes]
            nodes = np.where(inner, np.where(below, self.left[nodes], self.right[nodes]), nodes)
            inner = ~self.leaf[nodes]
        return math.fsum([self.baseline, *self.value[nodes].tolist()])

    def to_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "inputs": self.inputs,
            "roots": self.roots.tolist(),
            "feature": self.feature.tolist(),
            "threshold": self.threshold.tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "value": self.value.tolist(),
            "leaf": self.leaf.astype(int).tolist(),
        }


def tree_ensemble_from_dict(payload: dict) -> TreeEnsemble:
    """The trees of a file, checked so that every walk ends at a leaf: each split names an input that exists and
    children inside the arrays that come after it (so no walk loops)."""
    arrays = {name: np.asarray(payload[name]) for name in ("feature", "threshold", "left", "right", "value", "leaf")}
    nodes = len(arrays["feature"])
    if any(array.shape != (nodes,) for array in arrays.values()):
        raise ValueError("tree head arrays must all have one value per node")
    roots = np.asarray(payload["roots"], dtype=np.int64)
    leaf = arrays["leaf"].astype(bool)
    inputs = int(payload["inputs"])
    index = np.arange(nodes)
    splits = ~leaf
    if (
        nodes == 0
        or roots.size == 0
        or roots.min() < 0
        or roots.max() >= nodes
        or (splits & ((arrays["feature"] < 0) | (arrays["feature"] >= inputs))).any()
        or (splits & ((arrays["left"] <= index) | (arrays["right"] <= index))).any()
        or (splits & ((arrays["left"] >= nodes) | (arrays["right"] >= nodes))).any()
    ):
        raise ValueError("tree head nodes do not form trees over its inputs")
    return TreeEnsemble(
        baseline=float(payload["baseline"]),
        roots=roots,
        feature=arrays["feature"].astype(np.int64),
        threshold=arrays["threshold"].astype(np.float64),
        left=arrays["left"].astype(np.int64),
        right=arrays["right"].astype(np.int64),
        value=arrays["value"].astype(np.float64),
        leaf=leaf,
        inputs=inputs,
    )


@dataclass(frozen=True, eq=False)
class PairModel:
    """Logistic regression on standardised pair features, z = weights . (x - mean) / scale + bias, and p = sigmoid(z);
    or, with `trees`, p = sigmoid(the trees' sum over (z, the pair's text features))."""

    weights: np.ndarray
    bias: float
    mean: np.ndarray
    scale: np.ndarray
    cut: float  # probability at or above which a pair counts as a duplicate (chosen on the train split)
    dimension: int  # embedding size the vector features assume
    meta: dict = field(default_factory=dict)
    feature_version: str = FEATURE_VERSION  # which `pair_features.pair_features` set the head is given
    # A tree head: the trees read the regression's log-odds, then the pair's text features (`pair_probability`); the
    # regression reads the prefix of those features its weights cover (`linear_feature_version`'s).
    trees: TreeEnsemble | None = None
    # The cosine gate this head was chosen for, when it chose one (a tenant's verifier, from its labels): the decision
    # it makes applies it in place of the policy's threshold when it is lower (`decisions.duplicate_decide`).
    gate: float | None = None
    # The pair reader beside a shipped head (`pair_reader`): when present, the decision's probability combines both
    # and is served at the reader's cut (`decision_cut`).
    reader: PairReader | None = None

    @property
    def active_reader(self) -> PairReader | None:
        """The reader the decision uses: the head's, when it has one and the deployment switched readers on
        (`pair_reader.reader_on`)."""
        return self.reader if self.reader is not None and reader_on() else None

    @property
    def decision_cut(self) -> float:
        """The probability at or above which the decision serves: the active reader's cut, else the head's own. A
        probability recorded by a decision is on the same scale (`decisions.decision_probability`)."""
        reader = self.active_reader
        return self.cut if reader is None else reader.cut


def pair_model_from_dict(payload: dict, *, reader_directory: Path | None = None) -> PairModel:
    """The head of a file's `payload`. Its `reader` block is read only with `reader_directory` (where its adapters
    file lies): shipped heads are (`pair_model_default`); a tenant's verifier never is, since its cut is chosen on its
    own probabilities, even when its file began as a copy of a shipped head's."""
    if payload.get("feature_version") not in FEATURE_VERSIONS:
        raise ValueError(
            f"duplicate model of feature set {payload.get('feature_version')!r}, expected one of {FEATURE_VERSIONS}"
        )
    weights = np.asarray(payload["weights"], dtype=np.float64)
    mean = np.asarray(payload["mean"], dtype=np.float64)
    scale = np.asarray(payload["scale"], dtype=np.float64)
    if not (weights.shape == mean.shape == scale.shape) or weights.ndim != 1:
        raise ValueError("duplicate model weights, mean and scale must be vectors of one length")
    kind = payload.get("kind_of_head", LINEAR_KIND)
    if kind not in (LINEAR_KIND, TREES_KIND):
        raise ValueError(f"duplicate model of kind {kind!r}, expected {LINEAR_KIND!r} or {TREES_KIND!r}")
    dimension = int(payload["dimension"])
    linear_version = str(payload.get("linear_feature_version", payload["feature_version"]))
    if linear_version not in FEATURE_VERSIONS:
        raise ValueError(f"duplicate model regression of feature set {linear_version!r}")
    expected = pair_feature_count(dimension, feature_version=linear_version)
    if weights.shape[0] != expected:
        # A file whose weights do not match its feature set would fail every turn it scored: refused at load.
        raise ValueError(f"duplicate model has {weights.shape[0]} weights, its feature set needs {expected}")
    trees = None
    if kind == TREES_KIND:
        trees = tree_ensemble_from_dict(payload["trees"])
        # The trees read the log-odds, then every feature after the vector products.
        inputs = 1 + pair_feature_count(dimension, feature_version=str(payload["feature_version"])) - 2 * dimension
        if trees.inputs != inputs:
            raise ValueError(f"tree head reads {trees.inputs} inputs, its feature set gives {inputs}")
    gate = payload.get("gate")
    reader = None
    if payload.get("reader") and reader_directory is not None:
        reader = pair_reader_from_dict(payload["reader"], directory=reader_directory)
    skipped = ("weights", "mean", "scale", "bias", "cut", "dimension", "trees", "gate", "reader")
    meta = {k: v for k, v in payload.items() if k not in skipped}
    return PairModel(
        weights=weights,
        bias=float(payload["bias"]),
        mean=mean,
        scale=scale,
        cut=float(payload["cut"]),
        dimension=int(payload["dimension"]),
        meta=meta,
        feature_version=str(payload["feature_version"]),
        trees=trees,
        gate=None if gate is None else float(gate),
        reader=reader,
    )


def pair_model_load(path: Path = MODEL_PATH) -> PairModel:
    """The shipped head in the file at `path`, with its pair reader when it has one."""
    return pair_model_from_dict(json.loads(path.read_text(encoding="utf-8")), reader_directory=path.parent)


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


def regression_of(model: PairModel) -> PairModel:
    """The regression of `model` as a head of its own: a regression head itself; a tree head's regression, on the
    feature set its weights read (`linear_feature_version`), without the trees or a reader. What a tenant's verifier
    starts from and is regularised towards: its trees, when its labels choose trees, read this regression's log-odds."""
    if model.trees is None:
        return model
    return replace(
        model,
        trees=None,
        reader=None,
        feature_version=str(model.meta.get("linear_feature_version", FEATURE_VERSION)),
    )


def regression_log_odds(*, model: PairModel, features: np.ndarray) -> float:
    """The log-odds of `model`'s logistic regression on the features it reads (a prefix of `features`). For a tree
    head this is the trees' first input, and what a pair reader's combination reads (`decisions.decision_probability`):
    the reader was fitted beside the regression, not the trees."""
    known = model.weights.shape[0]
    return float(((features[:known] - model.mean) / model.scale) @ model.weights) + model.bias


def regression_probability(*, model: PairModel, features: np.ndarray) -> float:
    """The probability of `model`'s regression alone (`regression_log_odds`); for a regression head, its probability."""
    return _sigmoid(regression_log_odds(model=model, features=features))


def pair_log_odds(*, model: PairModel, features: np.ndarray) -> float:
    """The duplicate head's log-odds for the pair: its logistic regression on the features it reads (a prefix of
    `features`), or, for a tree head, its trees on that regression's log-odds followed by the pair's text features
    (everything after the 2 x dimension vector products: the cosine, then pair-v1's lexical features and the later
    sets')."""
    z = regression_log_odds(model=model, features=features)
    if model.trees is not None:
        z = model.trees.raw(np.concatenate([[z], features[2 * model.dimension :]]))
    return z


def pair_probability(*, model: PairModel, features: np.ndarray) -> float:
    """Probability that the pair is a duplicate, by the duplicate head (`pair_log_odds`)."""
    return _sigmoid(pair_log_odds(model=model, features=features))


def _sigmoid(z: float) -> float:
    return float(1.0 / (1.0 + np.exp(-z))) if z >= 0 else float(np.exp(z) / (1.0 + np.exp(z)))
