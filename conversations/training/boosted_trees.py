"""Boosted trees as the duplicate heads use them: fitted by scikit-learn's HistGradientBoostingClassifier at fixed
parameters (`TREE_PARAMETERS`), exported to a `duplicate_model.TreeEnsemble` that decisions walk in numpy
(`trees_export`), so turns never import scikit-learn. A tenant's verifier (`verifier_heads`) and a shipped head
(`duplicate_head_training`, `--trees`) fit them the same way, on a regression's log-odds and the pair's text
features."""

from __future__ import annotations

import numpy as np

from conversations.dedup.duplicate_model import TreeEnsemble
from conversations.training.labelled_pairs import INNER_FOLDS

# Few and shallow: they fit a few thousand labels in seconds on two cores and walk in a fraction of a millisecond per
# candidate; fixed, so a training is reproducible.
TREE_PARAMETERS = {
    "max_iter": 100,
    "learning_rate": 0.1,
    "max_leaf_nodes": 7,
    "min_samples_leaf": 20,
    "l2_regularization": 1.0,
    "early_stopping": False,
    "random_state": 0,
}


def trees_fit(rows: np.ndarray, labels: np.ndarray) -> object:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(**TREE_PARAMETERS).fit(rows, labels)


def trees_out_of_fold(rows: np.ndarray, labels: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Each row's probability by trees fitted on the other INNER_FOLDS - 1 folds (`folds`: each row's fold)."""
    predicted = np.zeros(len(labels))
    for fold in range(INNER_FOLDS):
        fit_on = folds != fold
        predicted[~fit_on] = trees_fit(rows[fit_on], labels[fit_on]).predict_proba(rows[~fit_on])[:, 1]
    return predicted


def trees_export(classifier: object, *, inputs: int) -> TreeEnsemble:
    """A fitted scikit-learn HistGradientBoostingClassifier (binary) as a TreeEnsemble whose `raw` is its
    `decision_function` (a test holds the two equal, so a scikit-learn that stores its trees otherwise fails there)."""
    nodes = [predictors[0].nodes for predictors in classifier._predictors]
    offsets = np.cumsum([0] + [len(tree) for tree in nodes[:-1]])
    glued = np.concatenate(nodes)
    shift = np.concatenate([np.full(len(tree), offset) for tree, offset in zip(nodes, offsets, strict=True)])
    leaf = glued["is_leaf"].astype(bool)
    return TreeEnsemble(
        baseline=float(np.ravel(classifier._baseline_prediction)[0]),
        roots=offsets.astype(np.int64),
        feature=np.where(leaf, 0, glued["feature_idx"]).astype(np.int64),
        threshold=np.where(leaf, 0.0, glued["num_threshold"]).astype(np.float64),
        left=np.where(leaf, 0, glued["left"] + shift).astype(np.int64),
        right=np.where(leaf, 0, glued["right"] + shift).astype(np.int64),
        value=np.where(leaf, glued["value"], 0.0).astype(np.float64),
        leaf=leaf,
        inputs=inputs,
    )
