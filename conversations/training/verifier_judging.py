"""Whether a newly trained verifier beats the decision in use, judged on held-out labels it was not trained on. No
database, no model: scores and labels in, a verdict with its figures out.

The rule (`_verdict`): the new model beats the active decision
  - by ranking the tenant's pairs better and serving more as applied: at each one's best cut for the tenant's
    precision target on these labels, the new model serves more duplicates than the active head by more than chance
    gives (`served_gain_lower_bound`: the bootstrap's one-sided ACTIVATION_CONFIDENCE bound of the difference is above
    0); at its own cut it serves more duplicates than the active decision at its own cut, at a precision that
    reaches the target (`_meets_target`: as a point estimate, or, for a cut set at the training labels' lower bound,
    not under it beyond chance); or
  - when the active decision, at its own cut, serves under the target beyond chance (`precision_bound` under
    it) and the new model serves nothing, or meets the target at its cut and is more precise than it beyond chance.
Both models are ranked at a cut chosen on the judging labels, and both are applied at the cut they serve with: the
new model's cut is set on its training labels at a lower confidence bound (`verifier_training.cut_choose`), so
comparing it there with the active head re-cut at its best on the judging labels would set a conservative cut
against an oracle one and refuse a model that ranks far better and serves more than the decision in use.
Which held-out labels judge (`activation_judge`):
  - with at least MIN_RANDOM_JUDGE_DUPLICATES duplicates among the held-out labels the review queue drew at random,
    the held-out labels the queue picked, each weighted by the inverse of its pick's inclusion probability (a random
    pick by its chance, a rule's pick once: `LabelledQuestionPair.traffic_weight`): a sample of the tenant's traffic,
    whose weighted precision and recall estimate the decision's on that traffic. The random picks alone would not
    be: the queue draws them from the decisions its rules left, so they miss the hardest ones, and precision on them
    reads high;
  - else every held-out label, unweighted. Most are the queue's near-gate picks, the hardest decisions, where a model
    better on the traffic can still miss the target; that judge is kept only until the random share has enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

import numpy as np

from conversations.training.duplicate_head_training import recall_at_precision

# Held-out random picks judge only with this many duplicates among them: with fewer, their weighted recall moves by
# more than the differences between models worth telling apart (at 30 duplicates and a recall near 0.3, a binomial
# standard deviation near 0.08), and the near-gate labels, biased but many more, judge instead.
MIN_RANDOM_JUDGE_DUPLICATES = 30
# A new model beats the active decision only when the duplicates it serves beyond the active decision's would still
# be more than none in this share of resamples of the judging labels: a handful of labels (3 served against 1) must
# not swap the decision that serves every turn. One-sided, by the bootstrap (ACTIVATION_RESAMPLES, a fixed seed, so
# the same labels always give the same verdict). The same confidence, one-sided, bounds a precision said to be under
# the target (`precision_bound`).
ACTIVATION_CONFIDENCE = 0.95
ACTIVATION_RESAMPLES = 2000


class Judge(StrEnum):
    # The held-out queue picks by inverse inclusion probability (the value predates the rules' picks joining the
    # random ones, and is kept: version files and the admin read it).
    RANDOM_PICKS_WEIGHTED = "random_picks_weighted"
    HELD_OUT_LABELS = "held_out_labels"  # every held-out label, unweighted


@dataclass(frozen=True)
class Judgement:
    judge: Judge
    beats_active: bool
    note: str  # why it was or was not judged better, in one sentence
    figures: dict  # both judges' figures, whichever decided


def decision_figures(decided: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> dict:
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


def precision_wilson_bounds(
    *, true_weight: np.ndarray, weight: np.ndarray, square_weight: np.ndarray, confidence: float, upper: bool = False
) -> np.ndarray:
    """The one-sided `confidence` Wilson bound of precision (the lower one, or with `upper` the upper one) for each
    total: `true_weight` of the duplicates served, `weight` and `square_weight` the sums of the served pairs' weights
    and of their squares. The sample size is Kish's effective one, weight² / square_weight, so a few heavily weighted
    picks count as few: a bootstrap over such picks leaves them all out of many resamples and reads precision 1.0
    there, whatever they say. Pure."""
    z = NormalDist().inv_cdf(confidence)
    tiny = np.finfo(float).tiny
    n = np.maximum(np.asarray(weight) ** 2 / np.maximum(square_weight, tiny), tiny)
    p = np.asarray(true_weight) / np.maximum(weight, tiny)
    spread = z * np.sqrt(p * (1.0 - p) / n + z**2 / (4.0 * n**2))
    return (p + z**2 / (2.0 * n) + (spread if upper else -spread)) / (1.0 + z**2 / n)


def precision_bound(*, decided: np.ndarray, labels: np.ndarray, weights: np.ndarray, upper: bool) -> float:
    """The one-sided ACTIVATION_CONFIDENCE upper bound (or with `upper` false, the lower one) of the (weighted)
    precision of the pairs `decided` serves (`precision_wilson_bounds`); nan when it serves none."""
    served = np.asarray(decided, dtype=bool)
    if not served.any():
        return float("nan")
    served_weight = np.asarray(weights, dtype=float)[served]
    return float(
        precision_wilson_bounds(
            true_weight=float((served_weight * (np.asarray(labels)[served] == 1)).sum()),
            weight=float(served_weight.sum()),
            square_weight=float((served_weight**2).sum()),
            confidence=ACTIVATION_CONFIDENCE,
            upper=upper,
        )
    )


def _meets_target(*, precision: float | None, upper_bound: float, cut_confident: bool, target: float) -> bool:
    """Whether a new model serves at a precision that reaches `target` at its cut, on the judging labels. A cut set at
    the training labels' lower bound (`cut_confident`) has its precision shown there already, on more labels than the
    held-out part serves at it (a few dozen, where a true precision of 0.92 reads under 0.90 about one time in five,
    by the binomial at 30 served): the held-out labels must then only not contradict it, their upper bound
    (`precision_bound`) at or above `target`. A cut that fell back to where the training labels' point estimate
    touched the target has shown nothing: its held-out precision must reach `target` itself."""
    if precision is None:
        return False
    if precision >= target:
        return True
    return cut_confident and np.isfinite(upper_bound) and upper_bound >= target


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
    cut_confident: bool = False,
) -> tuple[bool, str, dict]:
    """One judge's rule on one set of labels. The new model beats the active decision
    - when it ranks better and serves more: at each one's best cut for `target` on these labels it serves more
      (weighted) duplicates than the active head, by more than chance gives (`served_gain_lower_bound` above 0), and
      at its own `cut` it serves more duplicates than the active decision at its own `active_cut` (at its best cut
      when none is given) at a precision that reaches `target` (`_meets_target`, `cut_confident`: the training
      labels' lower bound of precision above the cut reaches `target`); or
    - when the active decision, at `active_cut`, is under `target` beyond chance (its precision's upper bound is under
      it), by serving nothing, or by meeting `target` at its own cut and being more precise than the active decision
      beyond chance (its precision's lower bound above the active decision's upper bound): fewer answers served right
      beat more served at a precision the tenant has said is too low, but a sliver served that the judging labels
      read as precise by chance (3 pairs at 1.0) is not fewer answers served right.
    `eligible` / `active_eligible`: the pairs each decision's other checks and own gate let through."""
    no_cut = not np.isfinite(cut) or cut > 1.0
    duplicates = weights * (labels == 1)
    decided = eligible & (new_scores >= cut)
    figures = decision_figures(decided, labels, weights)
    active_recall, best_active_cut = recall_at_precision(
        scores=active_scores, labels=labels, eligible=active_eligible, target=target, weights=weights
    )
    new_best_recall, best_new_cut = recall_at_precision(
        scores=new_scores, labels=labels, eligible=eligible, target=target, weights=weights
    )
    duplicate_weight = float(duplicates.sum())
    tolerance = 1e-9 * max(duplicate_weight, 1.0)
    best_active_decided = active_eligible & (active_scores >= best_active_cut)
    best_new_decided = eligible & (new_scores >= best_new_cut)
    # Served duplicates compared, not rounded recalls: a rounded recall must not beat an equal one.
    ranks_gain = float((duplicates * best_new_decided).sum() - (duplicates * best_active_decided).sum())
    gain_lower = served_gain_lower_bound(
        gain=duplicates * (best_new_decided.astype(float) - best_active_decided.astype(float))
    )
    active_figures, active_upper = None, float("nan")
    applied_active = best_active_decided
    if active_cut is not None:
        applied_active = active_eligible & (active_scores >= active_cut)
        active_figures = decision_figures(applied_active, labels, weights)
        active_upper = precision_bound(decided=applied_active, labels=labels, weights=weights, upper=True)
    new_served = float((duplicates * decided).sum())
    applied_active_served = float((duplicates * applied_active).sum())
    new_lower = precision_bound(decided=decided, labels=labels, weights=weights, upper=False)
    new_upper = precision_bound(decided=decided, labels=labels, weights=weights, upper=True)
    meets = _meets_target(
        precision=figures["precision"], upper_bound=new_upper, cut_confident=cut_confident, target=target
    )
    ranks_better = ranks_gain > tolerance and gain_lower > 0
    serves_more = new_served > applied_active_served + tolerance
    active_under = bool(np.isfinite(active_upper) and active_upper < target)
    gains = not no_cut and meets and serves_more and ranks_better
    more_precise = bool(np.isfinite(active_upper) and new_lower > active_upper)
    corrects = active_under and ((meets and more_precise) or no_cut)
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
    elif active_under and meets:
        note = (
            f"the active decision is under the target {target:.2f} at its cut (precision "
            f"{active_figures['precision']:.3f}, {ACTIVATION_CONFIDENCE:.0%} upper bound {active_upper:.3f}), but the "
            "new one is not more precise beyond "
            f"chance: precision {figures['precision']:.3f} on {figures['hits']} served, lower bound {new_lower:.3f}"
        )
    elif not meets and cut_confident:
        note = (
            f"precision {figures['precision']} at its cut is under the target {target:.2f} beyond chance "
            f"({ACTIVATION_CONFIDENCE:.0%} upper bound {new_upper:.3f} on {figures['hits']} served)"
        )
    elif not meets:
        note = (
            f"precision {figures['precision']} at its cut is under the target {target:.2f} (the cut was not set at a "
            "lower bound reaching it on the training labels)"
        )
    elif beats:
        note = (
            f"recall {new_best_recall:.3f} at precision >= {target:.2f} beats the active decision's "
            f"{active_recall:.3f}, and at its cut it serves recall {figures['recall']:.3f} at precision "
            f"{figures['precision']:.3f}"
        )
    elif ranks_gain <= tolerance:
        note = (
            f"recall {new_best_recall:.3f} does not beat the active decision's {active_recall:.3f} at "
            f"precision >= {target:.2f}"
        )
    elif not ranks_better:
        note = (
            f"recall {new_best_recall:.3f} at precision >= {target:.2f} is above the active decision's "
            f"{active_recall:.3f} by too few served duplicates to tell from chance ({ranks_gain:.3g} more; "
            f"{ACTIVATION_CONFIDENCE:.0%} lower bound {gain_lower:.3g})"
        )
    else:
        note = (
            f"at its cut it serves recall {figures['recall']:.3f}, no more than the active decision at its own cut "
            f"({applied_active_served / max(duplicate_weight, 1e-12):.3f})"
        )
    verdict = {
        "new": figures,
        "new_recall_at_target": round(new_best_recall, 4),
        "new_precision_lower_bound": round(new_lower, 4) if np.isfinite(new_lower) else None,
        "new_precision_upper_bound": round(new_upper, 4) if np.isfinite(new_upper) else None,
        "cut_confident": cut_confident,
        "active_recall_at_target": round(active_recall, 4),
        "active_cut_for_target": round(best_active_cut, 6) if np.isfinite(best_active_cut) else None,
        "active_at_its_cut": active_figures,
        "active_precision_upper_bound": round(active_upper, 4) if np.isfinite(active_upper) else None,
        "served_gain": round(ranks_gain, 4),
        "served_gain_lower_bound": round(gain_lower, 4) if np.isfinite(gain_lower) else None,
        "served_beyond_active_at_its_cut": round(new_served - applied_active_served, 4),
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
    cut_confident: bool = False,
    traffic_weights: np.ndarray | None = None,
) -> Judgement:
    """Whether the new model (probabilities `new_scores`, its `cut`) beats the active decision (`active_scores`, at its
    own `active_cut` and re-cut at its best for the target) on held-out labels (all arrays are of the held-out labels
    only; `eligible` / `active_eligible`, default the same: the pairs each decision's other checks and gate let
    through; `random_weights`: 1 / inclusion probability of a random pick of the review queue, 0 for any other label;
    `traffic_weights`: 1 / inclusion probability of any pick of the queue, 0 for a label given outside it, default
    `random_weights`). The rule is `_verdict`'s. The held-out queue picks judge, each by its traffic weight, when the
    random ones hold at least MIN_RANDOM_JUDGE_DUPLICATES duplicates; every held-out label, unweighted, judges
    otherwise. Both figures are returned whenever there are random picks to figure."""
    labels = np.asarray(labels, dtype=int)
    random_weights = np.asarray(random_weights, dtype=float)
    traffic = random_weights if traffic_weights is None else np.asarray(traffic_weights, dtype=float)
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
        cut_confident=cut_confident,
    )
    figures: dict = {"held_out_labels": everything}
    drawn = random_weights > 0
    random_duplicates = int(labels[drawn].sum())
    picked = traffic > 0
    if drawn.any():
        random_beats, random_note, weighted = _verdict(
            new_scores=new_scores[picked],
            cut=cut,
            active_scores=active_scores[picked],
            labels=labels[picked],
            eligible=eligible[picked],
            active_eligible=active_eligible[picked],
            active_cut=active_cut,
            weights=traffic[picked],
            target=precision_target,
            cut_confident=cut_confident,
        )
        figures["random_picks_weighted"] = {**weighted, "weight": round(float(traffic[picked].sum()), 3)}
    if random_duplicates >= MIN_RANDOM_JUDGE_DUPLICATES:
        return Judgement(
            judge=Judge.RANDOM_PICKS_WEIGHTED,
            beats_active=random_beats,
            note=(f"on {int(picked.sum())} held-out queue picks ({int(drawn.sum())} random), weighted: {random_note}"),
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
