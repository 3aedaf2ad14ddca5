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
     rule at the tenant's gate, reach the most recall at the tenant's precision target (ties: the stronger ones), on
     every training label, unweighted, random picks or not: the weighted random picks' recall hardly tells the
     penalties apart (on the learning bench's 1,000 and 3,000 labels several tie), and choosing by it moved recall at
     precision 0.90 on all held-out pairs by -0.005 and +0.015, inside the noise;
  2. the cut: the lowest at which those out-of-fold probabilities reach the target plus CUT_MARGIN (`cut_choose`),
     among the training part's random picks of the review queue, each weighted by the inverse of its pick's
     probability, once they hold MIN_RANDOM_JUDGE_DUPLICATES duplicates: the population the judge below uses, so the
     cut is set for the tenant's traffic and not for the near-gate picks, the hardest decisions, where it comes out
     far too high for that traffic; among every training label, unweighted, until then.
It is then judged on the held-out 30%, which took no part in either choice, against the decision in use (its head
and cut) re-cut at its best for the same target: it beats it only by meeting the target at its own cut with more
recall than the decision in use reaches at that precision, by more served duplicates than chance gives
(`served_gain_lower_bound`: the bootstrap's one-sided ACTIVATION_CONFIDENCE bound of the difference is above 0)
(`activation_judge`). Which held-out labels judge:
  - with at least MIN_RANDOM_JUDGE_DUPLICATES duplicates among the held-out labels the review queue drew at random,
    those labels alone, each weighted by the inverse of its pick's probability: a sample of the tenant's traffic,
    whose weighted precision and recall estimate the decision's on that traffic;
  - else every held-out label, unweighted. Most are the queue's near-gate picks, the hardest decisions, where a model
    better on the traffic can still miss the target; that judge is kept only until the random share has enough.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from conversations import decisions, question_pairs
from conversations.duplicate_head_training import recall_at_precision, significant, standardise
from conversations.duplicate_model import (
    LINEAR_KIND,
    ORDER_FEATURE_VERSION,
    TENANT_FEATURE_VERSION,
    TREES_KIND,
    PairModel,
    TreeEnsemble,
    pair_model_from_dict,
)
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
# Held-out random picks judge only with this many duplicates among them: with fewer, their weighted recall moves by
# more than the differences between models worth telling apart (at 30 duplicates and a recall near 0.3, a binomial
# standard deviation near 0.08), and the near-gate labels, biased but many more, judge instead.
MIN_RANDOM_JUDGE_DUPLICATES = 30
# A new model beats the active decision only when the duplicates it serves beyond the active decision's would still
# be more than none in this share of resamples of the judging labels: a handful of labels (3 served against 1) must
# not swap the decision that serves every turn. One-sided, by the bootstrap (ACTIVATION_RESAMPLES, a fixed seed, so
# the same labels always give the same verdict).
ACTIVATION_CONFIDENCE = 0.95
ACTIVATION_RESAMPLES = 2000
# How far under the policy's threshold a verifier may set its own cosine gate, tried in these steps, never under
# GATE_FLOOR: a tenant whose duplicates are worded further apart than the shipped head's training pairs (a bank's
# customers: most of their duplicates are under the default gate) is served only if the gate can come down, and only
# where its labels say the target still holds there.
GATE_STEPS = (0.0, 0.04, 0.08, 0.12, 0.16, 0.20, 0.26)
GATE_FLOOR = 0.50
# The tree head: boosted trees, few and shallow, on the shipped regression's log-odds and the pair's text features
# (pair-v3: where the shared words sit as well as which they are). Few enough to fit a few thousand labels in seconds
# on two cores and walk in a fraction of a millisecond per candidate; fixed, so a training is reproducible.
TREE_PARAMETERS = {
    "max_iter": 100,
    "learning_rate": 0.1,
    "max_leaf_nodes": 7,
    "min_samples_leaf": 20,
    "l2_regularization": 1.0,
    "early_stopping": False,
    "random_state": 0,
}
# A cut that no probability reaches: a verifier whose labels found no cut meeting the target serves nothing.
SERVES_NOTHING = 1.01

Progress = Callable[[float, str], None]


class TrainingRefused(ValueError):
    """The labels cannot train a verifier (too few, one class only); the message says what is missing."""


class CutChosenOn(StrEnum):
    RANDOM_PICKS_WEIGHTED = "random_picks_weighted"  # the training part's random picks, by inverse probability
    TRAINING_LABELS = "training_labels"  # every training label, unweighted


class Judge(StrEnum):
    RANDOM_PICKS_WEIGHTED = "random_picks_weighted"  # the held-out random picks, by inverse inclusion probability
    HELD_OUT_LABELS = "held_out_labels"  # every held-out label, unweighted


@dataclass(frozen=True)
class Judgement:
    judge: Judge
    beats_active: bool
    note: str  # why it was or was not judged better, in one sentence
    figures: dict  # both judges' figures, whichever decided


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


def _rule_checks(*, pairs: Sequence[LabelledQuestionPair], stored: np.ndarray) -> np.ndarray:
    """Per pair: whether every check of the decision but the cosine gate and the head lets it through (numbers and
    negation, the follow-up guard of a first turn). With the gate (`cosine >= gate`), only the head's probability
    then decides the pair."""
    return np.array(
        [
            not question_pairs.questions_conflict(p.question, p.stored_question)
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


def cut_choose(
    *,
    scores: np.ndarray,
    labels: np.ndarray,
    eligible: np.ndarray,
    random_weights: np.ndarray,
    precision_target: float,
) -> tuple[float, CutChosenOn]:
    """(the cut, the population that chose it) for out-of-fold probabilities `scores` of the training labels
    (`eligible`: the decision's other checks let the pair through; `random_weights`: 1 / inclusion probability of a
    random pick of the review queue, 0 for any other label). The lowest cut at which precision reaches the target plus
    CUT_MARGIN, else the target itself, inf when no cut reaches either: on the random picks, each counted by its
    weight, when they hold at least MIN_RANDOM_JUDGE_DUPLICATES duplicates, the traffic the weighted judge measures;
    on every label, unweighted, otherwise."""
    labels = np.asarray(labels, dtype=int)
    random_weights = np.asarray(random_weights, dtype=float)
    drawn = random_weights > 0
    if labels[drawn].sum() >= MIN_RANDOM_JUDGE_DUPLICATES:
        population = CutChosenOn.RANDOM_PICKS_WEIGHTED
        scores, labels, eligible, weights = scores[drawn], labels[drawn], eligible[drawn], random_weights[drawn]
    else:
        population, weights = CutChosenOn.TRAINING_LABELS, None
    for target in (min(precision_target + CUT_MARGIN, 1.0), precision_target):
        _, cut = recall_at_precision(scores=scores, labels=labels, eligible=eligible, target=target, weights=weights)
        if np.isfinite(cut):
            break
    return cut, population


def _figures(decided: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> dict:
    """Precision, recall and hit rate of the pairs `decided` served, each pair counted by its weight when `weights`
    are given (ratios of inverse-probability weighted totals), else once; `hits` and `pairs` stay counts of labels."""
    weights = np.ones(len(labels)) if weights is None else weights
    hit_weight = float((weights * decided).sum())
    true_positive = float((weights * (decided & (labels == 1))).sum())
    duplicate_weight = float((weights * labels).sum())
    return {
        "precision": round(true_positive / hit_weight, 4) if hit_weight > 0 else None,
        "recall": round(true_positive / duplicate_weight, 4) if duplicate_weight > 0 else 0.0,
        "hit_rate": round(hit_weight / float(weights.sum()), 4) if weights.sum() > 0 else 0.0,
        "hits": int(decided.sum()),
        "pairs": len(labels),
    }


def served_gain_lower_bound(*, gain: np.ndarray) -> float:
    """The one-sided ACTIVATION_CONFIDENCE lower bound of `gain.sum()` (per judging label: its weight when the new
    model serves a duplicate the active decision does not, minus it for one the active decision serves and the new
    model does not, else 0) by the bootstrap over the labels, seeded so it is reproducible. -inf with no labels."""
    gain = np.asarray(gain, dtype=float)
    if len(gain) == 0:
        return float("-inf")
    rng, totals = np.random.default_rng(0), []
    for start in range(0, ACTIVATION_RESAMPLES, 200):  # blocks, so thousands of labels stay a few megabytes
        draws = rng.integers(0, len(gain), size=(min(200, ACTIVATION_RESAMPLES - start), len(gain)))
        totals.append(gain[draws].sum(axis=1))
    return float(np.quantile(np.concatenate(totals), 1.0 - ACTIVATION_CONFIDENCE))


def precision_upper_bound(*, decided: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> float:
    """The one-sided ACTIVATION_CONFIDENCE upper bound of the (weighted) precision of the pairs `decided` serves, by
    the bootstrap over the labels, seeded so it is reproducible; nan when it serves none."""
    served = np.asarray(decided, dtype=bool)
    if not served.any():
        return float("nan")
    hit_weight = np.asarray(weights, dtype=float) * served
    true_weight = hit_weight * (np.asarray(labels) == 1)
    rng, values = np.random.default_rng(1), []
    for start in range(0, ACTIVATION_RESAMPLES, 200):
        draws = rng.integers(0, len(served), size=(min(200, ACTIVATION_RESAMPLES - start), len(served)))
        hits = hit_weight[draws].sum(axis=1)
        values.append(np.where(hits > 0, true_weight[draws].sum(axis=1) / np.maximum(hits, 1e-12), 1.0))
    return float(np.quantile(np.concatenate(values), ACTIVATION_CONFIDENCE))


def _verdict(
    *,
    new_scores: np.ndarray,
    cut: float,
    active_scores: np.ndarray,
    labels: np.ndarray,
    eligible: np.ndarray,
    active_eligible: np.ndarray,
    active_cut: float | None,
    weights: np.ndarray,
    target: float,
) -> tuple[bool, str, dict]:
    """One judge's rule on one set of labels. The new model beats the active decision
    - by meeting `target` at its own cut with more (weighted) duplicates served than the active head serves at its
      best cut for `target`, by more than chance gives (`served_gain_lower_bound` above 0); or
    - when the active decision, at its own cut `active_cut`, is under `target` beyond chance (the one-sided upper
      bound of its precision, `precision_upper_bound`, is under it), by meeting `target` at its own cut or serving
      nothing: fewer answers served right beat more served at a precision the tenant has said is too low.
    `eligible` / `active_eligible`: the pairs each decision's other checks and own gate let through."""
    no_cut = not np.isfinite(cut) or cut > 1.0
    decided = eligible & (new_scores >= cut)
    figures = _figures(decided, labels, weights)
    active_recall, best_active_cut = recall_at_precision(
        scores=active_scores, labels=labels, eligible=active_eligible, target=target, weights=weights
    )
    new_best_recall, _ = recall_at_precision(
        scores=new_scores, labels=labels, eligible=eligible, target=target, weights=weights
    )
    duplicate_weight = float((weights * labels).sum())
    # Served duplicates compared, not rounded recalls: a rounded recall must not beat an equal one.
    new_served = float((weights * (decided & (labels == 1))).sum())
    active_served = active_recall * duplicate_weight
    meets = figures["precision"] is not None and figures["precision"] >= target
    more = new_served > active_served + 1e-9 * max(duplicate_weight, 1.0)
    best_active_decided = active_eligible & (active_scores >= best_active_cut)
    gain_lower = served_gain_lower_bound(
        gain=weights * (labels == 1) * (decided.astype(float) - best_active_decided.astype(float))
    )
    active_figures, active_upper = None, float("nan")
    if active_cut is not None:
        active_decided = active_eligible & (active_scores >= active_cut)
        active_figures = _figures(active_decided, labels, weights)
        active_upper = precision_upper_bound(decided=active_decided, labels=labels, weights=weights)
    active_under = bool(np.isfinite(active_upper) and active_upper < target)
    gains = not no_cut and meets and more and gain_lower > 0
    corrects = active_under and (meets or no_cut)
    beats = gains or corrects
    if corrects and not gains:
        served = (
            "serving nothing" if no_cut else f"recall {figures['recall']:.3f} at precision {figures['precision']:.3f}"
        )
        note = (
            f"the active decision serves at precision {active_figures['precision']:.3f}, under the target {target:.2f} "
            f"({ACTIVATION_CONFIDENCE:.0%} upper bound {active_upper:.3f}); the new one meets it, {served}"
        )
    elif no_cut:
        note = f"no cut reaches precision {target:.2f} on the training labels"
    elif not meets:
        note = f"precision {figures['precision']} at its cut is under the target {target:.2f}"
    elif beats:
        note = (
            f"recall {figures['recall']:.3f} at precision {figures['precision']:.3f} beats the active decision's "
            f"{active_recall:.3f} at precision >= {target:.2f}"
        )
    elif more:
        note = (
            f"recall {figures['recall']:.3f} at precision {figures['precision']:.3f} is above the active decision's "
            f"{active_recall:.3f} by too few served duplicates to tell from chance ({new_served - active_served:.3g} "
            f"more; {ACTIVATION_CONFIDENCE:.0%} lower bound {gain_lower:.3g})"
        )
    else:
        note = (
            f"recall {figures['recall']:.3f} does not beat the active decision's {active_recall:.3f} at "
            f"precision >= {target:.2f}"
        )
    verdict = {
        "new": figures,
        "new_recall_at_target": round(new_best_recall, 4),
        "active_recall_at_target": round(active_recall, 4),
        "active_cut_for_target": round(best_active_cut, 6) if np.isfinite(best_active_cut) else None,
        "active_at_its_cut": active_figures,
        "active_precision_upper_bound": round(active_upper, 4) if np.isfinite(active_upper) else None,
        "served_gain": round(new_served - active_served, 4),
        "served_gain_lower_bound": round(gain_lower, 4) if np.isfinite(gain_lower) else None,
        "labels": int(len(labels)),
        "duplicates": int(labels.sum()),
    }
    return beats, note, verdict


def activation_judge(
    *,
    new_scores: np.ndarray,
    cut: float,
    active_scores: np.ndarray,
    labels: np.ndarray,
    eligible: np.ndarray,
    random_weights: np.ndarray,
    precision_target: float,
    active_eligible: np.ndarray | None = None,
    active_cut: float | None = None,
) -> Judgement:
    """Whether the new model (probabilities `new_scores`, its `cut`) beats the active decision (`active_scores`, at its
    own `active_cut` and re-cut at its best for the target) on held-out labels (all arrays are of the held-out labels
    only; `eligible` / `active_eligible`, default the same: the pairs each decision's other checks and gate let
    through; `random_weights`: 1 / inclusion probability of a random pick of the review queue, 0 for any other label).
    The rule is `_verdict`'s. The held-out random picks judge, weighted, when they hold at least
    MIN_RANDOM_JUDGE_DUPLICATES duplicates; every held-out label, unweighted, judges otherwise. Both figures are
    returned whenever there are random picks to figure."""
    labels = np.asarray(labels, dtype=int)
    random_weights = np.asarray(random_weights, dtype=float)
    active_eligible = eligible if active_eligible is None else active_eligible
    beats, note, everything = _verdict(
        new_scores=new_scores,
        cut=cut,
        active_scores=active_scores,
        labels=labels,
        eligible=eligible,
        active_eligible=active_eligible,
        active_cut=active_cut,
        weights=np.ones(len(labels)),
        target=precision_target,
    )
    figures: dict = {"held_out_labels": everything}
    drawn = random_weights > 0
    random_duplicates = int(labels[drawn].sum())
    if drawn.any():
        random_beats, random_note, weighted = _verdict(
            new_scores=new_scores[drawn],
            cut=cut,
            active_scores=active_scores[drawn],
            labels=labels[drawn],
            eligible=eligible[drawn],
            active_eligible=active_eligible[drawn],
            active_cut=active_cut,
            weights=random_weights[drawn],
            target=precision_target,
        )
        figures["random_picks_weighted"] = {**weighted, "weight": round(float(random_weights[drawn].sum()), 3)}
    if random_duplicates >= MIN_RANDOM_JUDGE_DUPLICATES:
        return Judgement(
            judge=Judge.RANDOM_PICKS_WEIGHTED,
            beats_active=random_beats,
            note=f"on {int(drawn.sum())} held-out random picks, weighted: {random_note}",
            figures=figures,
        )
    return Judgement(
        judge=Judge.HELD_OUT_LABELS,
        beats_active=beats,
        note=(
            f"on {len(labels)} held-out labels ({random_duplicates} random-pick duplicates, under "
            f"{MIN_RANDOM_JUDGE_DUPLICATES}): {note}"
        ),
        figures=figures,
    )


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
        probability = _sigmoid(design @ theta)
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


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-z) without overflow for a large |z| (labels a model separates perfectly drive z far out)."""
    return np.exp(-np.logaddexp(0.0, -z))


def gate_candidates(threshold: float) -> list[float]:
    """The cosine gates a verifier may choose for a policy `threshold`: the threshold and GATE_STEPS under it, never
    under GATE_FLOOR (nor a threshold already under it), highest first."""
    gates = {round(threshold - step, 4) for step in GATE_STEPS if threshold - step >= GATE_FLOOR - 1e-9}
    return sorted(gates | {threshold}, reverse=True)


def _log_odds(model: PairModel, features: np.ndarray) -> np.ndarray:
    """The regression's log-odds of `model` for each row of `features` (the prefix its weights cover)."""
    known = model.weights.shape[0]
    return ((features[:, :known] - model.mean) / model.scale) @ model.weights + model.bias


def model_probabilities(model: PairModel, features: np.ndarray) -> np.ndarray:
    """`question_pairs.pair_probability` of `model` for each row of `features` (a feature set at least as long as
    the one it reads: pair-v1 and pair-v2 are prefixes of pair-v3), the regression vectorised."""
    z = _log_odds(model, features)
    if model.trees is not None:
        start = 2 * model.dimension
        rows = np.column_stack([z, features[:, start : start + model.trees.inputs - 1]])
        z = np.array([model.trees.raw(row) for row in rows])
    return _sigmoid(z)


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


def _trees_fit(rows: np.ndarray, labels: np.ndarray) -> object:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(**TREE_PARAMETERS).fit(rows, labels)


@dataclass(frozen=True)
class _Candidate:
    kind: str  # LINEAR_KIND or TREES_KIND
    oof: np.ndarray  # out-of-fold probabilities of the training labels (0 elsewhere)
    penalty: float | None = None
    added_penalty: float | None = None


def _linear_candidate(
    *,
    standardised: np.ndarray,
    labels: np.ndarray,
    train: np.ndarray,
    folds: np.ndarray,
    eligible: np.ndarray,
    prior: PairModel,
    known: int,
    precision_target: float,
    progress: Progress,
) -> _Candidate:
    """The regression towards the shipped head, its two penalties chosen by out-of-fold recall at the target at the
    policy's gate (ties: the stronger ones, the head nearer the shipped one)."""
    train_index = np.where(train)[0]
    choices = []
    grid = [(penalty, added) for penalty in PENALTIES for added in ADDED_PENALTIES]
    for number, (penalty, added) in enumerate(grid):
        oof = np.zeros(len(labels))
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
        progress(0.6 + 0.2 * (number + 1) / len(grid), f"penalty {penalty:g}, added {added:g}: recall {recall:.3f}")
    _, penalty, added, oof = max(choices, key=lambda c: (c[0], c[1], c[2]))
    return _Candidate(kind=LINEAR_KIND, oof=oof, penalty=penalty, added_penalty=added)


def _trees_candidate(*, rows: np.ndarray, labels: np.ndarray, train: np.ndarray, folds: np.ndarray) -> _Candidate:
    train_index = np.where(train)[0]
    oof = np.zeros(len(labels))
    for fold in range(INNER_FOLDS):
        fit_on = train_index[folds[train_index] != fold]
        score_on = train_index[folds[train_index] == fold]
        if len(set(labels[fit_on].tolist())) < 2:
            return _Candidate(kind=TREES_KIND, oof=np.zeros(len(labels)))
        oof[score_on] = _trees_fit(rows[fit_on], labels[fit_on]).predict_proba(rows[score_on])[:, 1]
    return _Candidate(kind=TREES_KIND, oof=oof)


def _form_and_gate_choose(
    *,
    candidates: Sequence[_Candidate],
    gates: Sequence[float],
    cosine: np.ndarray,
    checks: np.ndarray,
    labels: np.ndarray,
    train: np.ndarray,
    precision_target: float,
) -> tuple[_Candidate, float, dict]:
    """The head and gate whose out-of-fold probabilities, through the decision rule at that gate, reach the most
    recall at the target on the training labels; ties go to the regression (the head nearer the shipped one) and to
    the higher gate. Returns the figures of every pairing too."""
    table, best = {}, None
    for candidate in candidates:
        for gate in gates:
            eligible = (cosine >= gate) & checks
            recall, _ = recall_at_precision(
                scores=candidate.oof[train], labels=labels[train], eligible=eligible[train], target=precision_target
            )
            table[f"{candidate.kind}@{gate:.2f}"] = round(recall, 4)
            key = (round(recall, 3), candidate.kind == LINEAR_KIND, gate)
            if best is None or key > best[0]:
                best = (key, candidate, gate)
    return best[1], best[2], table


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
    """Train on `pairs` (with `first`/`second` the unit vectors of each pair's question and stored question), from
    `prior` (the shipped head): the regression towards it and the tree head on its log-odds side by side, each at the
    gates `gate_candidates` offers, and keep the pairing with the most out-of-fold recall at the target; then judge
    it against `active` (the head deciding now, at its own gate) on the held-out part. `meta` goes into the payload
    as it is."""
    labels_check(pairs)
    labels = np.array([int(p.is_duplicate) for p in pairs])
    held_out = np.array([label_is_held_out(p.label_id) for p in pairs])
    random_weights = np.array([p.random_pick_weight for p in pairs], dtype=float)
    train = ~held_out
    folds = np.array([label_inner_fold(p.label_id) for p in pairs])
    progress(0.55, "features")
    features = np.stack(
        [
            question_pairs.pair_features(
                first=p.question,
                second=p.stored_question,
                first_vector=first[i],
                second_vector=second[i],
                feature_version=ORDER_FEATURE_VERSION,
            )
            for i, p in enumerate(pairs)
        ]
    )
    linear_count = question_pairs.pair_feature_count(prior.dimension, feature_version=TENANT_FEATURE_VERSION)
    known = prior.weights.shape[0]
    extended = prior_extend(prior, features=features[train, :linear_count])
    standardised = (features[:, :linear_count] - extended.mean) / extended.scale
    cosine = np.clip((first * second).sum(axis=1), -1.0, 1.0)
    checks = _rule_checks(pairs=pairs, stored=second)
    linear = _linear_candidate(
        standardised=standardised,
        labels=labels,
        train=train,
        folds=folds,
        eligible=(cosine >= threshold) & checks,
        prior=extended,
        known=known,
        precision_target=precision_target,
        progress=progress,
    )
    progress(0.82, "the tree head")
    tree_rows = np.column_stack([_log_odds(prior, features), features[:, 2 * prior.dimension :]])
    trees = _trees_candidate(rows=tree_rows, labels=labels, train=train, folds=folds)
    chosen, gate, table = _form_and_gate_choose(
        candidates=(linear, trees),
        gates=gate_candidates(threshold),
        cosine=cosine,
        checks=checks,
        labels=labels,
        train=train,
        precision_target=precision_target,
    )
    eligible = (cosine >= gate) & checks
    cut, cut_chosen_on = cut_choose(
        scores=chosen.oof[train],
        labels=labels[train],
        eligible=eligible[train],
        random_weights=random_weights[train],
        precision_target=precision_target,
    )
    cut_population = train & (random_weights > 0) if cut_chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED else train
    progress(0.92, f"fitting the {chosen.kind} head at gate {gate:.2f}")
    if chosen.kind == LINEAR_KIND:
        weights, bias = fit_towards(
            standardised[train],
            labels[train],
            prior=extended,
            penalty=chosen.penalty,
            added_penalty=chosen.added_penalty,
            known=known,
        )
        new_probability = _sigmoid(standardised @ weights + bias)
        head = {
            "feature_version": TENANT_FEATURE_VERSION,
            "kind": "logistic head on pair-v2 features, regularised towards the shipped head",
            "bias": significant(bias),
            "weights": [significant(w) for w in weights],
            "mean": [significant(m) for m in extended.mean],
            "scale": [significant(s) for s in extended.scale],
        }
    else:
        classifier = _trees_fit(tree_rows[train], labels[train])
        new_probability = classifier.predict_proba(tree_rows)[:, 1]
        ensemble = trees_export(classifier, inputs=tree_rows.shape[1])
        head = {
            "kind_of_head": TREES_KIND,
            "feature_version": ORDER_FEATURE_VERSION,
            "linear_feature_version": prior.feature_version,
            "kind": "boosted trees on the shipped head's log-odds and pair-v3 text features",
            "bias": prior.bias,
            "weights": prior.weights.tolist(),
            "mean": prior.mean.tolist(),
            "scale": prior.scale.tolist(),
            "trees": ensemble.to_dict(),
        }

    progress(0.95, "judging on the held-out labels")
    active_probability = model_probabilities(active, features)
    active_gate = threshold if active.gate is None else min(threshold, active.gate)
    active_eligible = (cosine >= active_gate) & checks
    held_labels, held_eligible = labels[held_out], eligible[held_out]
    judgement = activation_judge(
        new_scores=new_probability[held_out],
        cut=cut,
        active_scores=active_probability[held_out],
        labels=held_labels,
        eligible=held_eligible,
        active_eligible=active_eligible[held_out],
        active_cut=active.cut,
        random_weights=random_weights[held_out],
        precision_target=precision_target,
    )
    everything = judgement.figures["held_out_labels"]
    finite = bool(np.isfinite(cut))
    figures = {
        "precision_target": precision_target,
        "threshold": threshold,
        "kind_of_head": chosen.kind,
        "gate": gate,
        "out_of_fold_recall_at_target": table,
        "penalty": chosen.penalty,
        "added_penalty": chosen.added_penalty,
        "cut": round(float(cut), 6) if finite else None,
        "cut_chosen_on": str(cut_chosen_on),
        "cut_chosen_on_labels": int(cut_population.sum()),
        "labels": len(pairs),
        "train_labels": int(train.sum()),
        "held_out_labels": int(held_out.sum()),
        "held_out_duplicates": int(held_labels.sum()),
        "random_pick_labels": int((random_weights > 0).sum()),
        "train_out_of_fold_recall_at_target": table[f"{chosen.kind}@{gate:.2f}"],
        "held_out": everything["new"],
        "held_out_recall_at_target": everything["new_recall_at_target"],
        "active_held_out": _figures(
            active_eligible[held_out] & (active_probability[held_out] >= active.cut), held_labels
        ),
        "active_held_out_recall_at_target": everything["active_recall_at_target"],
        "active_cut_for_target": everything["active_cut_for_target"],
        "judge": str(judgement.judge),
        "judges": judgement.figures,
    }
    payload = {
        "lexical_features": list(question_pairs.LEXICAL_FEATURES),
        "extra_features": list(question_pairs.PAIR_V2_FEATURES),
        "order_features": list(question_pairs.PAIR_V3_FEATURES),
        **meta,
        "dimension": int(first.shape[1]),
        "trained": datetime.datetime.now(tz=datetime.UTC).isoformat(timespec="seconds"),
        "threshold": threshold,
        "gate": gate if gate < threshold else None,
        "cut": round(float(cut), 6) if finite else SERVES_NOTHING,
        "figures": figures,
        **head,
    }
    pair_model_from_dict(payload)  # the payload reads back as a model, or this raises before anything is written
    chosen_on = "random picks, weighted" if cut_chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED else "labels, unweighted"
    note = (
        f"{judgement.note} ({chosen.kind} head at gate {gate:.2f}; cut chosen on {int(cut_population.sum())} "
        f"training {chosen_on})"
    )
    return VerifierTrained(payload=payload, figures=figures, beats_active=judgement.beats_active, note=note)
