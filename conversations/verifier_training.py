"""Training a tenant's duplicate verifier from that tenant's labelled pairs, and the judgement of whether it beats the
decision in use. No database: labels in, a model file's payload and its figures out.

What it fits: the duplicate head's logistic regression on the pair-v2 features (`question_pairs.pair_features`: the
shipped head's pair-v1 features, then `PAIR_V2_FEATURES`), with an L2 penalty towards the shipped head's weights
(0 for the features it does not read) rather than towards zero, in the shipped head's standardisation (the added
features': the training labels'). The shipped features' weights and the added ones' have penalties of their own
(`PENALTIES`, `ADDED_PENALTIES`): the added ones have no fitted weight to stay near. A few hundred labels then move
the head only where they disagree with it, and no labels leave it deciding as shipped. Why this and not a tree head,
token-alignment features or a cross-encoder fine-tuned from the bundled MiniLM: docs/conversations.md ("Learning from
review").

How it chooses, on the training part of the labels only (70% by a salted hash of `label_id`,
`labelled_pairs.label_is_held_out`):
  1. the two penalties, by 5-fold cross-validation: the pair whose out-of-fold probabilities, run through the decision
     rule at the tenant's gate, reach the most recall at the tenant's precision target (ties: the stronger ones);
  2. the cut: the lowest at which those out-of-fold probabilities reach the target plus CUT_MARGIN.
It is then judged on the held-out 30%, which took no part in either choice, against the decision in use (its head
and cut) re-cut at its best for the same target: it beats it only by meeting the target at its own cut with more
recall than the decision in use reaches at that precision.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from conversations import decisions, question_pairs
from conversations.duplicate_head_training import significant, standardise
from conversations.duplicate_model import TENANT_FEATURE_VERSION, PairModel, pair_model_from_dict
from conversations.labelled_pairs import INNER_FOLDS, LabelledQuestionPair, label_inner_fold, label_is_held_out

# Penalties towards the shipped weights, in units of summed log-loss: the strongest keeps the shipped head almost as
# it is, the weakest lets a few thousand labels move it well away. Weaker ones than these overfit 3,000 labels.
PENALTIES = (300.0, 3000.0, 10000.0, 30000.0)
# Penalties on the weights of the features the shipped head does not read (prior weight 0, `PAIR_V2_FEATURES`): they
# have no fitted weight to stay near, and held as strongly as the shipped ones they stay at almost no effect. Chosen
# by cross-validation together with PENALTIES.
ADDED_PENALTIES = (1.0, 10.0, 100.0)
# The cut is chosen for the target plus this much on the training labels' out-of-fold probabilities, so that the
# held-out precision, about 0.02 noisier at 1,000 labels, still reaches the target more often than not.
CUT_MARGIN = 0.02
# Fewer labels than this, or of one class only, train nothing: no cut could be chosen nor judged.
MIN_LABELS = 20
MIN_DUPLICATES = 5

Progress = Callable[[float, str], None]


class TrainingRefused(ValueError):
    """The labels cannot train a verifier (too few, one class only); the message says what is missing."""


@dataclass(frozen=True)
class VerifierTrained:
    payload: dict  # the model file's content (`duplicate_model.pair_model_from_dict` reads it)
    figures: dict  # held-out figures of the new model and of the decision in use
    beats_active: bool
    note: str  # why it was or was not judged better, in one sentence


def labels_sha256(pairs: Sequence[LabelledQuestionPair]) -> str:
    """A hash of the training set that does not depend on the order the labels came in."""
    lines = sorted(f"{p.label_id}\t{int(p.is_duplicate)}\t{p.question}\t{p.stored_question}" for p in pairs)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def labels_check(pairs: Sequence[LabelledQuestionPair]) -> None:
    """Raise TrainingRefused when `pairs` cannot train and judge a verifier: checked before anything is embedded."""
    labels = np.array([int(p.is_duplicate) for p in pairs], dtype=int)
    if len(pairs) < MIN_LABELS or labels.sum() < MIN_DUPLICATES or (len(labels) - labels.sum()) < MIN_DUPLICATES:
        raise TrainingRefused(
            f"{len(pairs)} labels ({int(labels.sum())} duplicates): a verifier needs at least {MIN_LABELS}, with at "
            f"least {MIN_DUPLICATES} of each kind. Review more decisions, then train again."
        )
    held_out = np.array([label_is_held_out(p.label_id) for p in pairs], dtype=bool)
    if labels[~held_out].sum() < MIN_DUPLICATES or labels[held_out].sum() < 2:
        raise TrainingRefused("Too few duplicates fall in the training or held-out part: review more decisions.")


def _rule_eligible(
    *, pairs: Sequence[LabelledQuestionPair], cosine: np.ndarray, threshold: float, stored: np.ndarray
) -> np.ndarray:
    """Per pair: whether every check of the decision but the head lets it through (gate, numbers and negation, the
    follow-up guard of a first turn), so that only the head's probability decides it."""
    return np.array(
        [
            cosine[i] >= threshold
            and not question_pairs.questions_conflict(p.question, p.stored_question)
            and decisions.followup_context_matches(
                question=p.question,
                previous_vector=None,
                candidate=decisions.StoredQuestion(0, p.stored_question, stored[i], 0, None),
                threshold=1.0,
            )
            for i, p in enumerate(pairs)
        ],
        dtype=bool,
    )


def recall_at_precision(
    *, scores: np.ndarray, labels: np.ndarray, eligible: np.ndarray, target: float
) -> tuple[float, float]:
    """(the most recall any cut reaches with precision >= target, that cut) over pairs the rule lets through; recall
    counts every duplicate, eligible or not. (0.0, inf) when no cut reaches the target."""
    duplicates = max(int(labels.sum()), 1)
    index = np.where(eligible)[0]
    order = index[np.argsort(-scores[index], kind="stable")]
    true_positive = np.cumsum(labels[order])
    precision = true_positive / np.arange(1, len(order) + 1)
    ranked = scores[order]
    real = np.append(ranked[1:] != ranked[:-1], True) if len(order) else np.array([], dtype=bool)
    reached = np.where((precision >= target) & real)[0]
    if len(reached) == 0:
        return 0.0, float("inf")
    best = reached[np.argmax(true_positive[reached])]
    return float(true_positive[best] / duplicates), float(ranked[best])


def _figures(decided: np.ndarray, labels: np.ndarray) -> dict:
    hits = int(decided.sum())
    true_positive = int((decided & (labels == 1)).sum())
    return {
        "precision": round(true_positive / hits, 4) if hits else None,
        "recall": round(true_positive / max(int(labels.sum()), 1), 4),
        "hit_rate": round(hits / max(len(labels), 1), 4),
        "hits": hits,
        "pairs": len(labels),
    }


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
    Newton's method from the prior: deterministic, and with no labels the prior itself. With `added_penalty`, the
    weights after the first `known` (the features the shipped head does not read, whose prior weight is 0) are held
    by that penalty instead: they have no fitted weight to stay near, only the labels."""
    rows, columns = standardised.shape
    design = np.hstack([standardised, np.ones((rows, 1))])
    start = np.append(prior.weights, prior.bias)
    theta = start.copy()
    ridge = np.full(columns + 1, penalty)
    if added_penalty is not None and known is not None:
        ridge[known:columns] = added_penalty
    ridge[-1] = 1e-6
    for _ in range(50):
        probability = _sigmoid(design @ theta)
        gradient = design.T @ (probability - labels) + ridge * (theta - start)
        hessian = (design * (probability * (1 - probability))[:, None]).T @ design + np.diag(ridge)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-8:
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


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-z) without overflow for a large |z| (labels a model separates perfectly drive z far out)."""
    return np.exp(-np.logaddexp(0.0, -z))


def verifier_train(
    *,
    pairs: Sequence[LabelledQuestionPair],
    first: np.ndarray,
    second: np.ndarray,
    prior: PairModel,
    active: PairModel,
    threshold: float,
    precision_target: float,
    progress: Progress,
    meta: dict,
) -> VerifierTrained:
    """Train on `pairs` (with `first`/`second` the unit vectors of each pair's question and stored question), towards
    `prior` (the shipped head), and judge the result against `active` (the head deciding now) on the held-out part,
    both through the decision rule at the tenant's gate `threshold`. `meta` goes into the payload as it is."""
    labels_check(pairs)
    labels = np.array([int(p.is_duplicate) for p in pairs])
    held_out = np.array([label_is_held_out(p.label_id) for p in pairs])
    train = ~held_out
    progress(0.55, "features")
    features = np.stack(
        [
            question_pairs.pair_features(
                first=p.question,
                second=p.stored_question,
                first_vector=first[i],
                second_vector=second[i],
                feature_version=TENANT_FEATURE_VERSION,
            )
            for i, p in enumerate(pairs)
        ]
    )
    known = prior.weights.shape[0]
    prior = prior_extend(prior, features=features[train])
    standardised = (features - prior.mean) / prior.scale
    cosine = np.clip((first * second).sum(axis=1), -1.0, 1.0)
    eligible = _rule_eligible(pairs=pairs, cosine=cosine, threshold=threshold, stored=second)

    progress(0.65, "choosing the penalties")
    folds = np.array([label_inner_fold(p.label_id) for p in pairs])
    train_index = np.where(train)[0]
    choices = []
    grid = [(penalty, added) for penalty in PENALTIES for added in ADDED_PENALTIES]
    for number, (penalty, added) in enumerate(grid):
        oof = np.zeros(len(pairs))
        for fold in range(INNER_FOLDS):
            fit_on = train_index[folds[train_index] != fold]
            score_on = train_index[folds[train_index] == fold]
            weights, bias = fit_towards(
                standardised[fit_on], labels[fit_on], prior=prior, penalty=penalty, added_penalty=added, known=known
            )
            oof[score_on] = _sigmoid(standardised[score_on] @ weights + bias)
        recall, _ = recall_at_precision(
            scores=oof[train], labels=labels[train], eligible=eligible[train], target=precision_target
        )
        choices.append((round(recall, 3), penalty, added, oof))
        progress(
            0.65 + 0.25 * (number + 1) / len(grid),
            f"penalty {penalty:g}, added {added:g}: out-of-fold recall {recall:.3f}",
        )
    # Ties go to the stronger penalties: the head nearer the shipped one.
    oof_recall, penalty, added, oof = max(choices, key=lambda c: (c[0], c[1], c[2]))
    _, cut = recall_at_precision(
        scores=oof[train], labels=labels[train], eligible=eligible[train], target=min(precision_target + CUT_MARGIN, 1)
    )
    if not np.isfinite(cut):
        _, cut = recall_at_precision(
            scores=oof[train], labels=labels[train], eligible=eligible[train], target=precision_target
        )
    weights, bias = fit_towards(
        standardised[train], labels[train], prior=prior, penalty=penalty, added_penalty=added, known=known
    )

    progress(0.95, "judging on the held-out labels")
    new_probability = _sigmoid(standardised @ weights + bias)
    # pair-v1's features are a prefix of pair-v2's, so an active model of either set reads its own columns.
    active_features = features[:, : active.weights.shape[0]]
    active_probability = _sigmoid(((active_features - active.mean) / active.scale) @ active.weights + active.bias)
    held_labels, held_eligible = labels[held_out], eligible[held_out]
    new_figures = _figures(held_eligible & (new_probability[held_out] >= cut), held_labels)
    active_figures = _figures(held_eligible & (active_probability[held_out] >= active.cut), held_labels)
    active_recall, active_cut = recall_at_precision(
        scores=active_probability[held_out], labels=held_labels, eligible=held_eligible, target=precision_target
    )
    new_best_recall, _ = recall_at_precision(
        scores=new_probability[held_out], labels=held_labels, eligible=held_eligible, target=precision_target
    )
    meets = new_figures["precision"] is not None and new_figures["precision"] >= precision_target
    # More duplicates served, counted, not recalls compared: a rounded recall must not beat an equal one.
    new_true_positives = int((held_eligible & (new_probability[held_out] >= cut) & (held_labels == 1)).sum())
    active_true_positives = round(active_recall * max(int(held_labels.sum()), 1))
    beats = bool(np.isfinite(cut)) and meets and new_true_positives > active_true_positives
    if not np.isfinite(cut):
        note = f"no cut reaches precision {precision_target:.2f} on the training labels"
    elif not meets:
        note = f"held-out precision {new_figures['precision']} at its cut is under the target {precision_target:.2f}"
    elif beats:
        note = (
            f"held-out recall {new_figures['recall']:.3f} at precision {new_figures['precision']:.3f} beats the "
            f"active decision's {active_recall:.3f} at precision >= {precision_target:.2f}"
        )
    else:
        note = (
            f"held-out recall {new_figures['recall']:.3f} does not beat the active decision's {active_recall:.3f} at "
            f"precision >= {precision_target:.2f}"
        )
    figures = {
        "precision_target": precision_target,
        "threshold": threshold,
        "penalty": penalty,
        "added_penalty": added,
        "cut": round(float(cut), 6) if np.isfinite(cut) else None,
        "labels": len(pairs),
        "train_labels": int(train.sum()),
        "held_out_labels": int(held_out.sum()),
        "held_out_duplicates": int(held_labels.sum()),
        "train_out_of_fold_recall_at_target": oof_recall,
        "held_out": new_figures,
        "held_out_recall_at_target": round(new_best_recall, 4),
        "active_held_out": active_figures,
        "active_held_out_recall_at_target": round(active_recall, 4),
        "active_cut_for_target": round(active_cut, 6) if np.isfinite(active_cut) else None,
    }
    payload = {
        "feature_version": TENANT_FEATURE_VERSION,
        "lexical_features": list(question_pairs.LEXICAL_FEATURES),
        "extra_features": list(question_pairs.PAIR_V2_FEATURES),
        **meta,
        "dimension": int(first.shape[1]),
        "trained": datetime.datetime.now(tz=datetime.UTC).isoformat(timespec="seconds"),
        "kind": "logistic head on pair-v2 features, regularised towards the shipped head",
        "threshold": threshold,
        "cut": round(float(cut), 6) if np.isfinite(cut) else 1.0,
        "figures": figures,
        "bias": significant(bias),
        "weights": [significant(w) for w in weights],
        "mean": [significant(m) for m in prior.mean],
        "scale": [significant(s) for s in prior.scale],
    }
    pair_model_from_dict(payload)  # the payload reads back as a model, or this raises before anything is written
    return VerifierTrained(payload=payload, figures=figures, beats_active=beats, note=note)
