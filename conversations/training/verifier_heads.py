"""The two heads a tenant's verifier may be, fitted on labels and scored out of fold: the regression towards the
shipped duplicate head('s regression, when the shipped head is trees over one), and boosted trees on that regression's
log-odds and the pair's text features. No database: features and labels in, weights or trees out.
`verifier_training` chooses between them.

The regression: the duplicate head's logistic regression on the pair-v2 features (`pair_features.pair_features`:
the shipped head's pair-v1 features, then `PAIR_V2_FEATURES`), with an L2 penalty towards the shipped head's weights
(0 for the features it does not read) rather than towards zero, in the shipped head's standardisation (the added
features': the training labels'). The shipped features' weights and the added ones' have penalties of their own
(`PENALTIES`, `ADDED_PENALTIES`): the added ones have no fitted weight to stay near. A few hundred labels then move
the head only where they disagree with it, and no labels leave it deciding as shipped.

The trees: `boosted_trees`' (scikit-learn's, walked in numpy at turns) on the shipped regression's log-odds and the
pair's text features (pair-v3: where the shared words sit as well as which they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from conversations.dedup.duplicate_model import LINEAR_KIND, TREES_KIND, PairModel
from conversations.dedup.pair_features import TENANT_FEATURE_VERSION
from conversations.dedup.pair_reader import combined_probability, reader_scores
from conversations.training.boosted_trees import trees_fit
from conversations.training.duplicate_head_training import recall_at_precision, standardise
from conversations.training.labelled_pairs import INNER_FOLDS

Progress = Callable[[float, str], None]

# Penalties towards the shipped weights, in units of summed log-loss: the strongest keeps the shipped head almost as
# it is, the weakest lets a few thousand labels move it well away. Weaker ones than these overfit 3,000 labels.
PENALTIES = (300.0, 3000.0, 10000.0, 30000.0)
# Penalties on the weights of the features the shipped head does not read (prior weight 0, `PAIR_V2_FEATURES`): they
# have no fitted weight to stay near, and held as strongly as the shipped ones they stay at almost no effect. Chosen
# by cross-validation together with PENALTIES.
ADDED_PENALTIES = (1.0, 10.0, 100.0)


def fit_towards(
    standardised: np.ndarray,
    labels: np.ndarray,
    *,
    prior: PairModel,
    penalty: float,
    added_penalty: float | None = None,
    known: int | None = None,
) -> tuple[np.ndarray, float]:
    """Weights and bias minimising summed log-loss + penalty/2 * |weights - prior's|^2 (the bias is free), by
    Newton's method from the prior with step halving until the objective falls: deterministic, and with no labels the
    prior itself. A full step can overshoot where the labels disagree with the prior, the probabilities then saturate
    and the nearly free bias's curvature vanishes, so undamped steps diverge (the bias went to 8e8 on word-swap
    labels). With `added_penalty`, the weights after the first `known` (the features the shipped head does not read,
    whose prior weight is 0) are held by that penalty instead: they have no fitted weight to stay near, only the
    labels."""
    rows, columns = standardised.shape
    design = np.hstack([standardised, np.ones((rows, 1))])
    start = np.append(prior.weights, prior.bias)
    theta = start.copy()
    ridge = np.full(columns + 1, penalty)
    if added_penalty is not None and known is not None:
        ridge[known:columns] = added_penalty
    ridge[-1] = 1e-6

    def objective(values: np.ndarray) -> float:
        z = design @ values
        # log(1 + e^z) - y z, summed: the log-loss without overflow
        return float((np.logaddexp(0.0, z) - labels * z).sum() + 0.5 * (ridge * (values - start) ** 2).sum())

    current = objective(theta)
    for _ in range(50):
        probability = sigmoid(design @ theta)
        gradient = design.T @ (probability - labels) + ridge * (theta - start)
        hessian = (design * (probability * (1 - probability))[:, None]).T @ design + np.diag(ridge)
        step = np.linalg.solve(hessian, gradient)
        scale = 1.0
        while scale > 1e-6:
            trial = theta - scale * step
            value = objective(trial)
            if value <= current:
                break
            scale /= 2
        else:
            break  # no step along Newton's direction lowers the objective: at its minimum, to rounding
        theta, improvement, current = trial, current - value, value
        if np.abs(scale * step).max() < 1e-8 or improvement < 1e-9 * max(abs(current), 1.0):
            break
    return theta[:-1], float(theta[-1])


def prior_extend(prior: PairModel, *, features: np.ndarray) -> PairModel:
    """`prior` (a pair-v1 or pair-v2 head) as a pair-v2 head: the features it does not read get weight 0, so the
    penalty pulls them towards no effect, and the mean and scale of `features` (the training labels' pair-v2
    features) for their standardisation; what it reads keeps its own weights and standardisation."""
    known = prior.weights.shape[0]
    if known == features.shape[1]:
        return prior
    mean, scale = standardise(features[:, known:])
    extra = features.shape[1] - known
    return replace(
        prior,
        weights=np.concatenate([prior.weights, np.zeros(extra)]),
        mean=np.concatenate([prior.mean, mean]),
        scale=np.concatenate([prior.scale, scale]),
        feature_version=TENANT_FEATURE_VERSION,
    )


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-z) without overflow for a large |z| (labels a model separates perfectly drive z far out)."""
    return np.exp(-np.logaddexp(0.0, -z))


def log_odds(model: PairModel, features: np.ndarray) -> np.ndarray:
    """The regression's log-odds of `model` for each row of `features` (the prefix its weights cover)."""
    known = model.weights.shape[0]
    return ((features[:, :known] - model.mean) / model.scale) @ model.weights + model.bias


def model_probabilities(model: PairModel, features: np.ndarray) -> np.ndarray:
    """`duplicate_model.pair_probability` of `model` for each row of `features` (a feature set at least as long as
    the one it reads: pair-v1 and pair-v2 are prefixes of pair-v3), the regression vectorised."""
    z = log_odds(model, features)
    if model.trees is not None:
        start = 2 * model.dimension
        rows = np.column_stack([z, features[:, start : start + model.trees.inputs - 1]])
        z = np.array([model.trees.raw(row) for row in rows])
    return sigmoid(z)


def decision_probabilities(
    model: PairModel, features: np.ndarray, pairs: Sequence[tuple[str, str]]
) -> tuple[np.ndarray, float]:
    """What the decision by `model` reads for each pair (its questions `pairs`, its `features`) and the cut it serves
    at, as `decisions.decision_probability` gives them one pair at a time: the head's probabilities and cut, or with
    a pair reader their combination with the reader's scores and the reader's cut."""
    probabilities = model_probabilities(model, features)
    reader = model.active_reader
    scores = None if reader is None else reader_scores(reader=reader, pairs=pairs)
    if scores is None:
        return probabilities, model.cut
    regression = sigmoid(log_odds(model, features))  # what the reader was fitted beside, as the decision reads it
    combined = [
        combined_probability(reader=reader, head_probability=float(p), reader_score=float(r))
        for p, r in zip(regression, scores, strict=True)
    ]
    return np.array(combined), reader.cut


def selection_recall(*, scores: np.ndarray, labels: np.ndarray, eligible: np.ndarray, target: float) -> float:
    """What the penalties, the head and the gate are chosen by: the out-of-fold recall at precision `target`
    (`recall_at_precision`) of `scores` among the pairs `eligible`."""
    return recall_at_precision(scores=scores, labels=labels, eligible=eligible, target=target)[0]


@dataclass(frozen=True)
class Candidate:
    kind: str  # LINEAR_KIND or TREES_KIND
    oof: np.ndarray  # out-of-fold probabilities of the training labels (0 elsewhere)
    penalty: float | None = None
    added_penalty: float | None = None


def linear_candidates(
    *,
    standardised: np.ndarray,
    labels: np.ndarray,
    train: np.ndarray,
    folds: np.ndarray,
    prior: PairModel,
    known: int,
    progress: Progress,
) -> list[Candidate]:
    """The regression towards the shipped head at each pair of penalties (`PENALTIES` x `ADDED_PENALTIES`), with its
    out-of-fold probabilities: `verifier_training` chooses among them together with the gate, since the penalties that
    rank best among the pairs over the policy's threshold need not be those that rank best down to a lower gate."""
    train_index = np.where(train)[0]
    candidates = []
    grid = [(penalty, added) for penalty in PENALTIES for added in ADDED_PENALTIES]
    for number, (penalty, added) in enumerate(grid):
        oof = np.zeros(len(labels))
        for fold in range(INNER_FOLDS):
            fit_on = train_index[folds[train_index] != fold]
            score_on = train_index[folds[train_index] == fold]
            weights, bias = fit_towards(
                standardised[fit_on], labels[fit_on], prior=prior, penalty=penalty, added_penalty=added, known=known
            )
            oof[score_on] = sigmoid(standardised[score_on] @ weights + bias)
        candidates.append(Candidate(kind=LINEAR_KIND, oof=oof, penalty=penalty, added_penalty=added))
        progress(0.6 + 0.2 * (number + 1) / len(grid), f"penalty {penalty:g}, added {added:g}")
    return candidates


def trees_candidate(*, rows: np.ndarray, labels: np.ndarray, train: np.ndarray, folds: np.ndarray) -> Candidate:
    train_index = np.where(train)[0]
    oof = np.zeros(len(labels))
    for fold in range(INNER_FOLDS):
        fit_on = train_index[folds[train_index] != fold]
        score_on = train_index[folds[train_index] == fold]
        if len(set(labels[fit_on].tolist())) < 2:
            return Candidate(kind=TREES_KIND, oof=np.zeros(len(labels)))
        oof[score_on] = trees_fit(rows[fit_on], labels[fit_on]).predict_proba(rows[score_on])[:, 1]
    return Candidate(kind=TREES_KIND, oof=oof)
