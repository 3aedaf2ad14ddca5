"""Training a tenant's duplicate verifier from that tenant's labelled pairs, and the judgement of whether it beats the
decision in use. No database: labels in, a model file's payload and its figures out.

Two heads are fitted side by side (`verifier_heads`: the regression towards the shipped head, boosted trees on its
log-odds and the pair's text features) and each is scored by out-of-fold recall at the tenant's precision target at
each gate `gate_candidates` offers; the best pairing is kept. Why these and not token alignment or a cross-encoder
fine-tuned from the bundled MiniLM: docs/conversations.md ("Learning from review").

How it chooses, on the training part of the labels only (70% by a salted hash of `label_id`,
`labelled_pairs.label_is_held_out`):
  1. the head, the regression's two penalties when it is the regression, and the gate, together, by 5-fold
     cross-validation: those whose out-of-fold probabilities, run through the decision rule at that gate, reach the
     most recall at the tenant's precision target (ties: the regression, the higher gate, the stronger penalties), on
     every training label, unweighted, random picks or not (`_form_and_gate_choose`); the regression at the lowest
     gate only, the trees at any;
  2. the cut: the lowest at which those out-of-fold probabilities reach the target with CUT_CONFIDENCE
     (`cut_choose`: a lower confidence bound of the precision above the cut, not its point estimate), among the
     training part's picks of the review queue, each weighted by the inverse of its pick's inclusion probability
     (`LabelledQuestionPair.traffic_weight`: a random pick by its chance, a rule's pick once), once the random picks
     hold MIN_RANDOM_JUDGE_DUPLICATES duplicates: the population the judge uses, so the cut is set for the tenant's
     traffic, not for the near-gate picks alone, the hardest decisions, where it comes out far too high for that
     traffic, nor for the random picks alone, which the queue draws from what its rules left and where it comes out
     too low; among every training label, unweighted, until then.
It is then judged on the held-out 30%, which took no part in any choice, against the decision in use at its own gate
(`verifier_judging.activation_judge`), told whether the lower bound reached the target at the cut (`cut_confident`):
a cut the point estimate set must show its precision on the held-out labels, one the bound set must not be
contradicted there.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from conversations.dedup import decisions, pair_features, question_pairs
from conversations.dedup.duplicate_model import (
    LINEAR_KIND,
    TREES_KIND,
    PairModel,
    pair_model_from_dict,
    regression_of,
)
from conversations.dedup.pair_features import ORDER_FEATURE_VERSION, TENANT_FEATURE_VERSION
from conversations.training import verifier_heads
from conversations.training.boosted_trees import trees_export, trees_fit
from conversations.training.duplicate_head_training import ranked_totals, recall_at_precision, significant
from conversations.training.labelled_pairs import LabelledQuestionPair, label_inner_fold, label_is_held_out
from conversations.training.verifier_heads import (
    Candidate,
    decision_probabilities,
    fit_towards,
    linear_candidates,
    log_odds,
    prior_extend,
    sigmoid,
    trees_candidate,
)
from conversations.training.verifier_judging import (
    MIN_RANDOM_JUDGE_DUPLICATES,
    Judgement,
    activation_judge,
    decision_figures,
    precision_wilson_bounds,
)

# The cut is the lowest at which the one-sided CUT_CONFIDENCE lower bound of the (weighted) precision above it reaches
# the target. The lowest cut whose point estimate reaches the target is where the running precision of a small sample
# last touched it, by chance as often as not, so its precision on the held-out labels falls under the target about
# half the time and a better model is refused; the bound's margin is wide on few labels and narrows as they grow.
CUT_CONFIDENCE = 0.90
# Fewer labels than this, or of one class only, train nothing: no cut could be chosen nor judged.
MIN_LABELS = 20
MIN_DUPLICATES = 5
# How far under the policy's threshold a verifier may set its own cosine gate, tried in these steps, never under
# GATE_FLOOR: a tenant whose duplicates are worded further apart than the shipped head's training pairs (a bank's
# customers: most of their duplicates are under the default gate) is served only if the gate can come down, and only
# where its labels say the target still holds there.
GATE_STEPS = (0.0, 0.04, 0.08, 0.12, 0.16, 0.20, 0.26)
GATE_FLOOR = 0.50
# The feature names a model file lists, so a reader of the file knows what its weights and trees read.
FEATURE_NAMES = {
    "lexical_features": list(pair_features.LEXICAL_FEATURES),
    "extra_features": list(pair_features.PAIR_V2_FEATURES),
    "order_features": list(pair_features.PAIR_V3_FEATURES),
}
# A cut that no probability reaches: a verifier whose labels found no cut meeting the target serves nothing.
SERVES_NOTHING = 1.01

Progress = Callable[[float, str], None]


class TrainingRefused(ValueError):
    """The labels cannot train a verifier (too few, one class only); the message says what is missing."""


class CutChosenOn(StrEnum):
    # The training part's queue picks by inverse inclusion probability (the value predates the rules' picks joining
    # the random ones, and is kept: version files and the admin read it).
    RANDOM_PICKS_WEIGHTED = "random_picks_weighted"
    TRAINING_LABELS = "training_labels"  # every training label, unweighted


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
    traffic_weights: np.ndarray | None = None,
) -> tuple[float, CutChosenOn]:
    """(the cut, the population that chose it) for out-of-fold probabilities `scores` of the training labels
    (`eligible`: the decision's other checks let the pair through; `random_weights`: 1 / inclusion probability of a
    random pick of the review queue, 0 for any other label; `traffic_weights`: 1 / inclusion probability of any pick
    of the queue, 0 for a label given outside it, default `random_weights`). The lowest cut at which the
    CUT_CONFIDENCE lower bound of precision reaches the target (`precision_lower_bounds`), else the lowest at which
    its point estimate does, inf when neither: on the queue's picks, each counted by its traffic weight, when the
    random picks hold at least MIN_RANDOM_JUDGE_DUPLICATES duplicates, the traffic the weighted judge measures; on
    every label, unweighted, otherwise."""
    labels = np.asarray(labels, dtype=int)
    random_weights = np.asarray(random_weights, dtype=float)
    traffic = random_weights if traffic_weights is None else np.asarray(traffic_weights, dtype=float)
    if labels[random_weights > 0].sum() >= MIN_RANDOM_JUDGE_DUPLICATES:
        population = CutChosenOn.RANDOM_PICKS_WEIGHTED
        picked = traffic > 0
        scores, labels, eligible, weights = scores[picked], labels[picked], eligible[picked], traffic[picked]
    else:
        population, weights = CutChosenOn.TRAINING_LABELS, None
    cut = _cut_at_lower_bound(scores=scores, labels=labels, eligible=eligible, weights=weights, target=precision_target)
    if not np.isfinite(cut):
        _, cut = recall_at_precision(
            scores=scores, labels=labels, eligible=eligible, target=precision_target, weights=weights
        )
    return cut, population


def precision_lower_bounds(*, true_weight: np.ndarray, weight: np.ndarray, square_weight: np.ndarray) -> np.ndarray:
    """The one-sided CUT_CONFIDENCE Wilson lower bound of precision for each running total
    (`verifier_judging.precision_wilson_bounds`, on Kish's effective sample size). Pure."""
    return precision_wilson_bounds(
        true_weight=true_weight, weight=weight, square_weight=square_weight, confidence=CUT_CONFIDENCE
    )


def _cut_at_lower_bound(
    *, scores: np.ndarray, labels: np.ndarray, eligible: np.ndarray, weights: np.ndarray | None, target: float
) -> float:
    """The lowest cut (a score served at or above) whose precision lower bound reaches `target`, among pairs
    `eligible`; inf when none does. Ties are one cut: only the last of equal scores is a place to cut."""
    weights = np.ones(len(labels)) if weights is None else np.asarray(weights, dtype=float)
    if not np.any(eligible):
        return float("inf")
    ranked, true_weight, weight, square_weight, real = ranked_totals(
        scores=scores, labels=labels, eligible=eligible, weights=weights
    )
    bounds = precision_lower_bounds(true_weight=true_weight, weight=weight, square_weight=square_weight)
    reached = np.where((bounds >= target) & real)[0]
    return float(ranked[reached[-1]]) if len(reached) else float("inf")


def gate_candidates(threshold: float) -> list[float]:
    """The cosine gates a verifier may choose for a policy `threshold`: the threshold and GATE_STEPS under it, never
    under GATE_FLOOR (nor a threshold already under it), highest first."""
    gates = {round(threshold - step, 4) for step in GATE_STEPS if threshold - step >= GATE_FLOOR - 1e-9}
    return sorted(gates | {threshold}, reverse=True)


@dataclass(frozen=True)
class _Labelled:
    """The labels as training reads them, one entry per pair."""

    labels: np.ndarray  # 1 = duplicate
    held_out: np.ndarray  # judges, never trains
    random_weights: np.ndarray  # 1 / inclusion probability of a random pick of the queue, else 0
    traffic_weights: np.ndarray  # 1 / inclusion probability of any pick of the queue, else 0
    folds: np.ndarray  # cross-validation fold of a training label
    cosine: np.ndarray  # of the pair's two vectors
    checks: np.ndarray  # every check of the decision but the gate and the head lets the pair through

    @property
    def train(self) -> np.ndarray:
        return ~self.held_out

    def eligible(self, gate: float) -> np.ndarray:
        """The pairs only the head decides at `gate`."""
        return (self.cosine >= gate) & self.checks


def _labelled(pairs: Sequence[LabelledQuestionPair], *, first: np.ndarray, second: np.ndarray) -> _Labelled:
    return _Labelled(
        labels=np.array([int(p.is_duplicate) for p in pairs]),
        held_out=np.array([label_is_held_out(p.label_id) for p in pairs], dtype=bool),
        random_weights=np.array([p.random_pick_weight for p in pairs], dtype=float),
        traffic_weights=np.array([p.traffic_weight for p in pairs], dtype=float),
        folds=np.array([label_inner_fold(p.label_id) for p in pairs]),
        cosine=np.clip((first * second).sum(axis=1), -1.0, 1.0),
        checks=_rule_checks(pairs=pairs, stored=second),
    )


def _form_and_gate_choose(
    *,
    candidates: Sequence[Candidate],
    gates: Sequence[float],
    data: _Labelled,
    precision_target: float,
) -> tuple[Candidate, float, dict]:
    """The head (a regression at one pair of penalties, or the trees) and gate whose out-of-fold probabilities, through
    the decision rule at that gate, reach the most recall at the target on the training labels
    (`verifier_heads.selection_recall`); ties go to the regression (the head nearer the shipped one), then to the
    higher gate, then to the stronger penalties. The regression competes at the lowest gate only: it reads the pair's
    cosine among its features, so its probability already ranks the pairs a higher gate would drop, and the cut it
    gets there keeps the target; a gate chosen among seven by a few hundred labels' recall is chosen by their noise
    as much as by the tenant's traffic. The trees compete at every gate. Returns, per head kind and gate, the best
    figure of that kind too (the regression's at every gate, for the reader: only the lowest is a choice)."""
    table: dict[str, float] = {}
    best = None
    train = data.train
    lowest = min(gates)
    for gate in gates:
        eligible = data.eligible(gate)[train]
        for candidate in candidates:
            recall = verifier_heads.selection_recall(
                scores=candidate.oof[train], labels=data.labels[train], eligible=eligible, target=precision_target
            )
            name = f"{candidate.kind}@{gate:.2f}"
            table[name] = max(table.get(name, 0.0), round(recall, 4))
            if candidate.kind == LINEAR_KIND and gate != lowest:
                continue
            key = (
                round(recall, 3),
                candidate.kind == LINEAR_KIND,
                gate,
                candidate.penalty or 0.0,
                candidate.added_penalty or 0.0,
            )
            if best is None or key > best[0]:
                best = (key, candidate, gate)
    return best[1], best[2], table


def _features_of(pairs: Sequence[LabelledQuestionPair], *, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The pair-v3 features of every pair (pair-v1 and pair-v2 are its prefixes, so each head reads its own)."""
    return pair_features.pair_features_of(
        [(p.question, p.stored_question) for p in pairs],
        first=first,
        second=second,
        feature_version=ORDER_FEATURE_VERSION,
    )


def _head_fit(
    *,
    chosen: Candidate,
    standardised: np.ndarray,
    tree_rows: np.ndarray,
    labels: np.ndarray,
    train: np.ndarray,
    extended: PairModel,
    known: int,
    prior: PairModel,
) -> tuple[np.ndarray, dict]:
    """The chosen head fitted on every training label: its probability for every pair, and the head's part of the
    model file (a regression's weights, or the shipped regression and the trees)."""
    if chosen.kind == LINEAR_KIND:
        weights, bias = fit_towards(
            standardised[train],
            labels[train],
            prior=extended,
            penalty=chosen.penalty,
            added_penalty=chosen.added_penalty,
            known=known,
        )
        return sigmoid(standardised @ weights + bias), {
            "feature_version": TENANT_FEATURE_VERSION,
            "kind": "logistic head on pair-v2 features, regularised towards the shipped head",
            "bias": significant(bias),
            "weights": [significant(w) for w in weights],
            "mean": [significant(m) for m in extended.mean],
            "scale": [significant(s) for s in extended.scale],
        }
    else:
        classifier = trees_fit(tree_rows[train], labels[train])
        ensemble = trees_export(classifier, inputs=tree_rows.shape[1])
        return classifier.predict_proba(tree_rows)[:, 1], {
            "kind_of_head": TREES_KIND,
            "feature_version": ORDER_FEATURE_VERSION,
            "linear_feature_version": prior.feature_version,
            "kind": "boosted trees on the shipped head's regression's log-odds and pair-v3 text features",
            "bias": prior.bias,
            "weights": prior.weights.tolist(),
            "mean": prior.mean.tolist(),
            "scale": prior.scale.tolist(),
            "trees": ensemble.to_dict(),
        }


def _cut_for(
    chosen: Candidate, *, eligible: np.ndarray, data: _Labelled, target: float
) -> tuple[float, CutChosenOn, np.ndarray]:
    """`cut_choose` for the chosen head's out-of-fold probabilities, and the training labels that chose it."""
    train = data.train
    cut, chosen_on = cut_choose(
        scores=chosen.oof[train],
        labels=data.labels[train],
        eligible=eligible[train],
        random_weights=data.random_weights[train],
        precision_target=target,
        traffic_weights=data.traffic_weights[train],
    )
    picked = train & (data.traffic_weights > 0)
    return cut, chosen_on, picked if chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED else train


def _cut_lower_bound(
    chosen: Candidate, *, cut: float, eligible: np.ndarray, data: _Labelled, population: np.ndarray, weighted: bool
) -> float:
    """The CUT_CONFIDENCE lower bound (`precision_lower_bounds`) of the out-of-fold precision above `cut` among the
    training labels that chose it (`population`, each counted by its traffic weight when `weighted`); nan when
    nothing there is served."""
    served = population & eligible & (chosen.oof >= cut)
    if not served.any():
        return float("nan")
    weights = data.traffic_weights[served] if weighted else np.ones(int(served.sum()))
    return float(
        precision_lower_bounds(
            true_weight=np.array([(weights * data.labels[served]).sum()]),
            weight=np.array([weights.sum()]),
            square_weight=np.array([(weights**2).sum()]),
        )[0]
    )


def _judge(
    *,
    new_probability: np.ndarray,
    cut: float,
    eligible: np.ndarray,
    active: PairModel,
    features: np.ndarray,
    questions: Sequence[tuple[str, str]],
    threshold: float,
    data: _Labelled,
    precision_target: float,
    cut_confident: bool,
) -> tuple[Judgement, np.ndarray]:
    """The new model judged against `active` at its own gate and cut on the held-out labels, and the pairs the active
    decision serves (every label). The active decision is the one turns get: with its pair reader, when it has one
    (`verifier_heads.decision_probabilities` of the pairs' `questions`)."""
    active_probability, active_cut = decision_probabilities(active, features, questions)
    active_gate = threshold if active.gate is None else min(threshold, active.gate)
    active_eligible = data.eligible(active_gate)
    held_out, labels, random_weights = data.held_out, data.labels, data.random_weights
    judgement = activation_judge(
        new_scores=new_probability[held_out],
        cut=cut,
        active_scores=active_probability[held_out],
        labels=labels[held_out],
        eligible=eligible[held_out],
        active_eligible=active_eligible[held_out],
        active_cut=active_cut,
        random_weights=random_weights[held_out],
        precision_target=precision_target,
        cut_confident=cut_confident,
        traffic_weights=data.traffic_weights[held_out],
    )
    return judgement, active_eligible & (active_probability >= active_cut)


def _version_figures(
    *,
    precision_target: float,
    threshold: float,
    chosen: Candidate,
    gate: float,
    table: dict,
    cut: float,
    cut_chosen_on: CutChosenOn,
    cut_population: np.ndarray,
    cut_bound: float,
    data: _Labelled,
    judgement: Judgement,
    active_decided: np.ndarray,
) -> dict:
    """The figures a version row and its file keep: what was chosen and on what, and both judges' held-out figures
    of the new model and of the decision in use (`active_decided`: the pairs it serves, every label)."""
    everything = judgement.figures["held_out_labels"]
    labels, held_out, random_weights = data.labels, data.held_out, data.random_weights
    held_labels = labels[held_out]
    return {
        "precision_target": precision_target,
        "threshold": threshold,
        "kind_of_head": chosen.kind,
        "gate": gate,
        "out_of_fold_recall_at_target": table,
        "penalty": chosen.penalty,
        "added_penalty": chosen.added_penalty,
        "cut": round(float(cut), 6) if np.isfinite(cut) else None,
        "cut_chosen_on": str(cut_chosen_on),
        "cut_chosen_on_labels": int(cut_population.sum()),
        "cut_precision_lower_bound": round(cut_bound, 4) if np.isfinite(cut_bound) else None,
        "labels": len(labels),
        "train_labels": int((~held_out).sum()),
        "held_out_labels": int(held_out.sum()),
        "held_out_duplicates": int(held_labels.sum()),
        "random_pick_labels": int((random_weights > 0).sum()),
        "train_out_of_fold_recall_at_target": table[f"{chosen.kind}@{gate:.2f}"],
        "held_out": everything["new"],
        "held_out_recall_at_target": everything["new_recall_at_target"],
        "active_held_out": decision_figures(active_decided[held_out], held_labels),
        "active_held_out_recall_at_target": everything["active_recall_at_target"],
        "active_cut_for_target": everything["active_cut_for_target"],
        "judge": str(judgement.judge),
        "judges": judgement.figures,
    }


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
    """Train on `pairs` (`first`/`second`: unit vectors of each question and stored question) from `prior`, the
    shipped head: the regression towards it and the tree head side by side at each gate `gate_candidates` offers,
    keeping the pairing with the most out-of-fold recall at the target; then judge it against `active` (the head
    deciding now, at its own gate) on the held-out part. `meta` goes into the payload as it is."""
    labels_check(pairs)
    # The regression under a shipped tree head: what the regression head is regularised towards and the trees read.
    prior = regression_of(prior)
    data = _labelled(pairs, first=first, second=second)
    labels, train = data.labels, data.train
    progress(0.55, "features")
    features = _features_of(pairs, first=first, second=second)
    linear_count = pair_features.pair_feature_count(prior.dimension, feature_version=TENANT_FEATURE_VERSION)
    known = prior.weights.shape[0]
    extended = prior_extend(prior, features=features[train, :linear_count])
    standardised = (features[:, :linear_count] - extended.mean) / extended.scale
    linear = linear_candidates(
        standardised=standardised,
        labels=labels,
        train=train,
        folds=data.folds,
        prior=extended,
        known=known,
        progress=progress,
    )
    progress(0.82, "the tree head")
    tree_rows = np.column_stack([log_odds(prior, features), features[:, 2 * prior.dimension :]])
    trees = trees_candidate(rows=tree_rows, labels=labels, train=train, folds=data.folds)
    chosen, gate, table = _form_and_gate_choose(
        candidates=(*linear, trees),
        gates=gate_candidates(threshold),
        data=data,
        precision_target=precision_target,
    )
    eligible = data.eligible(gate)
    cut, cut_chosen_on, cut_population = _cut_for(chosen, eligible=eligible, data=data, target=precision_target)
    cut_bound = _cut_lower_bound(
        chosen,
        cut=cut,
        eligible=eligible,
        data=data,
        population=cut_population,
        weighted=cut_chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED,
    )
    progress(0.92, f"fitting the {chosen.kind} head at gate {gate:.2f}")
    new_probability, head = _head_fit(
        chosen=chosen,
        standardised=standardised,
        tree_rows=tree_rows,
        labels=labels,
        train=train,
        extended=extended,
        known=known,
        prior=prior,
    )

    progress(0.95, "judging on the held-out labels")
    judgement, active_decided = _judge(
        new_probability=new_probability,
        cut=cut,
        eligible=eligible,
        active=active,
        features=features,
        questions=[(p.question, p.stored_question) for p in pairs],
        threshold=threshold,
        data=data,
        precision_target=precision_target,
        cut_confident=bool(cut_bound >= precision_target),
    )
    figures = _version_figures(
        precision_target=precision_target,
        threshold=threshold,
        chosen=chosen,
        gate=gate,
        table=table,
        cut=cut,
        cut_chosen_on=cut_chosen_on,
        cut_population=cut_population,
        cut_bound=cut_bound,
        data=data,
        judgement=judgement,
        active_decided=active_decided,
    )
    payload = {
        **FEATURE_NAMES,
        **meta,
        "dimension": int(first.shape[1]),
        "trained": datetime.datetime.now(tz=datetime.UTC).isoformat(timespec="seconds"),
        "threshold": threshold,
        "gate": gate if gate < threshold else None,
        "cut": figures["cut"] if figures["cut"] is not None else SERVES_NOTHING,
        "figures": figures,
        **head,
    }
    pair_model_from_dict(payload)  # the payload reads back as a model, or this raises before anything is written
    on = "queue picks, weighted" if cut_chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED else "labels, unweighted"
    note = (
        f"{judgement.note} ({chosen.kind} head at gate {gate:.2f}; cut chosen on {cut_population.sum()} training {on})"
    )
    return VerifierTrained(payload=payload, figures=figures, beats_active=judgement.beats_active, note=note)
