"""A tenant's trained duplicate verifier: trained from its own labels (command and task), active only when it beats
the decision in use on held-out labels, rolled back in one step, never loaded for another tenant, and replaced by the
shipped head (with a logged error, never a failed turn) when its file is missing or corrupt."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from conversations.dedup import decisions, tenant_verifiers
from conversations.dedup.duplicate_model import PairModel
from conversations.dedup.pair_features import PAIR_V2_FEATURES, TENANT_FEATURE_VERSION
from conversations.dedup.tenant_verifiers import tenant_verifiers_load, verifier_load, verifier_path
from conversations.models import DedupEvent, DuplicateModelStatus, DuplicateModelVersion
from conversations.review.dashboard_selectors import dashboard_what_if, dashboard_what_if_models
from conversations.tasks import duplicate_model_train_task
from conversations.training import verifiers
from conversations.training.duplicate_head_training import recall_at_precision
from conversations.training.labelled_pairs import LabelledQuestionPair, label_is_held_out, labelled_pairs_read
from conversations.training.verifier_heads import ADDED_PENALTIES, PENALTIES, fit_towards
from conversations.training.verifier_judging import (
    MIN_RANDOM_JUDGE_DUPLICATES,
    Judge,
    activation_judge,
    served_gain_lower_bound,
)
from conversations.training.verifier_training import CutChosenOn, cut_choose, precision_lower_bounds
from conversations.training.verifiers import (
    duplicate_model_activate,
    duplicate_model_rollback,
    duplicate_model_shadow,
    duplicate_model_train,
    duplicate_model_version_create,
)
from retrieval.embeddings import BUNDLED_MODEL_NAME
from tests.conversations.helpers import indexed_kb
from tests.conversations.test_api import ask, start
from tests.conversations.verifier_files import trained_version

pytestmark = pytest.mark.django_db

SUPPORT_PAIRS = Path(__file__).parent / "data" / "support_pairs.jsonl"


@pytest.fixture(autouse=True)
def model_dir(settings, tmp_path: Path) -> Path:
    settings.DUPLICATE_MODEL_DIR = tmp_path / "models"
    tenant_verifiers._models.clear()
    return settings.DUPLICATE_MODEL_DIR


def _pairs_file(tmp_path: Path, *, labels: str = "true", copies: int = 4) -> Path:
    """The support-desk pairs `copies` times over (each copy its own pair ids). `labels`: "true", "flipped" (every
    pair labelled wrongly) or "noise" (each copy of a pair labelled at random, so no model can learn them)."""
    rows = [json.loads(line) for line in SUPPORT_PAIRS.read_text().splitlines() if line.strip()]
    path = tmp_path / f"{labels}-{copies}.jsonl"
    noise = random.Random(7)
    with path.open("w") as handle:
        for copy in range(copies):
            for index, row in enumerate(rows):
                label = {
                    "true": int(row["is_duplicate"]),
                    "flipped": 1 - int(row["is_duplicate"]),
                    "noise": noise.randint(0, 1),
                }[labels]
                handle.write(json.dumps({**row, "is_duplicate": label, "pair_id": f"{copy}-{index}"}) + "\n")
    return path


def _train_file(tenant, path: Path) -> DuplicateModelVersion:
    row = duplicate_model_version_create(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME, source=str(path))
    return duplicate_model_train(tenant=tenant, version_id=row.pk, pairs=labelled_pairs_read(path))


# --- training and activation ---------------------------------------------------------------------------------------


def test_the_command_trains_on_a_pairs_file_and_prints_its_figures(tenant, tmp_path, capsys):
    call_command("duplicate_model_train", tenant=tenant.slug, pairs=str(_pairs_file(tmp_path)))
    printed = capsys.readouterr().out
    row = DuplicateModelVersion.objects.for_tenant(tenant).get()
    assert row.status in (DuplicateModelStatus.ACTIVE, DuplicateModelStatus.CANDIDATE)
    assert f"v1 of {BUNDLED_MODEL_NAME}: {row.status} (220 labels)" in printed and '"held_out"' in printed
    assert row.embedding_model == BUNDLED_MODEL_NAME
    assert row.label_count == 220 and len(row.training_set_sha256) == 64
    # A pairs file has no random picks of the review queue: every held-out label judges, and the row says so.
    assert row.figures["judge"] == Judge.HELD_OUT_LABELS and row.figures["random_pick_labels"] == 0
    assert "random_picks_weighted" not in row.figures["judges"]
    # and its cut was chosen on every training label, as the row and the note say
    assert row.figures["cut_chosen_on"] == CutChosenOn.TRAINING_LABELS
    assert row.figures["cut_chosen_on_labels"] == row.figures["train_labels"]
    assert f"cut chosen on {row.figures['train_labels']} training labels, unweighted" in printed
    assert row.figures["penalty"] in PENALTIES and row.figures["added_penalty"] in ADDED_PENALTIES
    assert row.figures["held_out_labels"] + row.figures["train_labels"] == 220
    payload = json.loads(verifier_path(tenant=tenant, version=1).read_text())
    assert payload["tenant_id"] == tenant.pk and payload["version"] == 1
    model = verifier_load(tenant=tenant, row=row).model
    assert model.cut == payload["cut"]
    # The tenant's verifier reads the richer feature set, and decides a pair with it.
    assert payload["feature_version"] == model.feature_version == TENANT_FEATURE_VERSION
    assert payload["extra_features"] == list(PAIR_V2_FEATURES)
    vector = np.ones(model.dimension) / np.sqrt(model.dimension)
    decided = decisions.duplicate_decide(
        question="How do I reset my password?",
        question_vector=vector,
        previous_vector=None,
        candidates=[decisions.StoredQuestion(1, "How can I reset my password?", vector, 1, None)],
        threshold=0.76,
        pair_model=model,
    )
    assert decided.probability is not None and 0.0 <= decided.probability <= 1.0


def test_the_added_features_are_held_by_their_own_penalty_and_no_labels_leave_the_prior():
    rng = np.random.default_rng(11)
    known, added = 3, 2
    prior = PairModel(
        weights=np.array([1.0, -1.0, 0.5, 0.0, 0.0]),
        bias=0.2,
        mean=np.zeros(known + added),
        scale=np.ones(known + added),
        cut=0.5,
        dimension=1,
    )
    features = rng.normal(size=(400, known + added))
    labels = (features[:, 3] + 0.3 * rng.normal(size=400) > 0).astype(float)  # only an added feature tells
    weights, bias = fit_towards(features[:0], labels[:0], prior=prior, penalty=100.0, added_penalty=1.0, known=known)
    np.testing.assert_allclose(weights, prior.weights)
    assert bias == pytest.approx(prior.bias)
    held, _ = fit_towards(features, labels, prior=prior, penalty=3000.0)
    free, _ = fit_towards(features, labels, prior=prior, penalty=3000.0, added_penalty=1.0, known=known)
    # Held as strongly as the fitted weights, the added feature barely moves; with its own penalty it carries the fit,
    # while the shipped weights stay near their prior either way.
    assert abs(held[3]) < 0.1 < 1.0 < free[3]
    np.testing.assert_allclose(free[:known], prior.weights[:known], atol=0.1)


def test_the_command_refuses_bad_input_with_a_message(tenant, tmp_path):
    with pytest.raises(CommandError, match="No tenant"):
        call_command("duplicate_model_train", tenant="nobody", pairs=str(_pairs_file(tmp_path)))
    with pytest.raises(CommandError, match="No labelled pairs"):
        call_command("duplicate_model_train", tenant=tenant.slug, pairs=str(tmp_path / "nowhere.jsonl"))
    few = tmp_path / "few.jsonl"
    few.write_text(SUPPORT_PAIRS.read_text().splitlines()[0].replace("{", '{"pair_id": "1", ', 1) + "\n")
    with pytest.raises(CommandError, match="not trained: 1 labels"):
        call_command("duplicate_model_train", tenant=tenant.slug, pairs=str(few))
    assert DuplicateModelVersion.objects.for_tenant(tenant).get().status == DuplicateModelStatus.FAILED


def test_a_model_that_does_not_beat_the_active_decision_stays_a_candidate(tenant, tmp_path):
    first = _train_file(tenant, _pairs_file(tmp_path))
    duplicate_model_activate(tenant=tenant, version_id=first.pk)
    # The same labels again: the new version is the active one retrained, no better on the labels it is judged on.
    again = _train_file(tenant, _pairs_file(tmp_path))
    assert again.status == DuplicateModelStatus.CANDIDATE, again.decision_note
    assert again.decision_note.startswith("kept as a candidate")
    assert tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active.version_id == first.pk


def test_a_decision_under_the_target_loses_to_one_that_serves_less(tenant, tmp_path):
    # Labels that say the shipped head serves wrong answers half the time (each pair labelled at random): no model
    # can learn them, but the active decision's precision is far under the tenant's target, so a version that meets
    # it by serving nothing replaces it.
    row = _train_file(tenant, _pairs_file(tmp_path, labels="noise"))
    assert row.status == DuplicateModelStatus.ACTIVE, row.decision_note
    assert "under the target" in row.decision_note
    judged = row.figures["judges"]["held_out_labels"]
    assert judged["active_precision_upper_bound"] < row.figures["precision_target"]
    model = tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active.model
    vector = np.ones(model.dimension) / np.sqrt(model.dimension)
    decided = decisions.duplicate_decide(
        question="How do I reset my password?",
        question_vector=vector,
        previous_vector=None,
        candidates=[decisions.StoredQuestion(1, "How do I reset my password?", vector, 1, None)],
        threshold=0.76,
        pair_model=model,
    )
    if row.figures["cut"] is None:  # no cut met the target: it serves nothing, not even the same words
        assert model.cut > 1.0 and not decided.hit and decided.reason.startswith("pair model says different")
    else:
        assert row.figures["held_out"]["precision"] >= row.figures["precision_target"]


def test_a_model_that_beats_the_active_decision_becomes_active(tenant, tmp_path):
    bad = _train_file(tenant, _pairs_file(tmp_path, labels="flipped"))
    duplicate_model_activate(tenant=tenant, version_id=bad.pk)
    good = _train_file(tenant, _pairs_file(tmp_path))
    assert good.status == DuplicateModelStatus.ACTIVE, good.decision_note
    assert good.figures["compared_with"] == "tenant model v1"
    assert good.figures["held_out"]["recall"] > good.figures["active_held_out_recall_at_target"]
    bad.refresh_from_db()
    assert bad.status == DuplicateModelStatus.RETIRED
    assert tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active.version_id == good.pk


def test_the_task_trains_from_the_tenants_own_labels_and_runs_once(tenant, other_tenant, tmp_path, monkeypatch):
    asked_for = []
    own = labelled_pairs_read(_pairs_file(tmp_path))

    def labels(*, tenant, embedding_model):
        asked_for.append((tenant.pk, embedding_model))
        return own

    monkeypatch.setattr(verifiers, "duplicate_labels_training", labels)
    row = duplicate_model_version_create(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    assert duplicate_model_train_task(tenant.pk, row.pk) in (
        DuplicateModelStatus.ACTIVE,
        DuplicateModelStatus.CANDIDATE,
    )
    assert asked_for == [(tenant.pk, BUNDLED_MODEL_NAME)]  # the labels of the version's own model
    duplicate_model_train_task(tenant.pk, row.pk)  # a second run of the same version does nothing
    assert asked_for == [(tenant.pk, BUNDLED_MODEL_NAME)]
    # another tenant's id with this version's id is no version of that tenant
    assert duplicate_model_train_task(other_tenant.pk, row.pk) is None
    assert duplicate_model_train_task(10**9, row.pk) is None


def _as_random_picks(pairs, *, probability: float, every: int = 1):
    """`pairs` with every `every`-th one a random pick of the review queue, drawn with `probability`."""
    return [
        replace(pair, pick_reason="random", pick_probability=probability) if index % every == 0 else pair
        for index, pair in enumerate(pairs)
    ]


def test_with_enough_random_picks_they_judge_weighted_and_the_row_records_it(tenant, tmp_path):
    pairs = _as_random_picks(labelled_pairs_read(_pairs_file(tmp_path, copies=8)), probability=0.2)
    row = duplicate_model_version_create(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME, source="test")
    row = duplicate_model_train(tenant=tenant, version_id=row.pk, pairs=pairs)
    assert row.figures["judge"] == Judge.RANDOM_PICKS_WEIGHTED, row.decision_note
    weighted = row.figures["judges"]["random_picks_weighted"]
    assert weighted["duplicates"] >= MIN_RANDOM_JUDGE_DUPLICATES
    assert weighted["weight"] == pytest.approx(5.0 * weighted["labels"])
    assert f"held-out queue picks ({weighted['labels']} random), weighted" in row.decision_note
    assert row.figures["random_pick_labels"] == len(pairs)
    # The cut was chosen on the training part's random picks, the population the judge uses.
    assert row.figures["cut_chosen_on"] == CutChosenOn.RANDOM_PICKS_WEIGHTED
    training_picks = sum(not label_is_held_out(p.label_id) for p in pairs)
    assert row.figures["cut_chosen_on_labels"] == training_picks
    assert f"cut chosen on {training_picks} training queue picks, weighted" in row.decision_note
    # The judge is told whether those picks bound the precision above the cut at the target.
    bound = row.figures["cut_precision_lower_bound"]
    assert bound is not None and 0.0 < bound <= 1.0
    assert weighted["cut_confident"] is (bound >= row.figures["precision_target"])


def test_with_too_few_random_picks_the_held_out_labels_judge(tenant, tmp_path):
    pairs = _as_random_picks(labelled_pairs_read(_pairs_file(tmp_path)), probability=0.2, every=10)
    row = duplicate_model_version_create(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME, source="test")
    row = duplicate_model_train(tenant=tenant, version_id=row.pk, pairs=pairs)
    assert row.figures["judge"] == Judge.HELD_OUT_LABELS
    assert row.figures["judges"]["random_picks_weighted"]["duplicates"] < MIN_RANDOM_JUDGE_DUPLICATES
    assert f"under {MIN_RANDOM_JUDGE_DUPLICATES}" in row.decision_note
    # Too few random picks in the training part as well: every training label chose the cut.
    assert row.figures["cut_chosen_on"] == CutChosenOn.TRAINING_LABELS
    assert row.figures["cut_chosen_on_labels"] == row.figures["train_labels"]


def test_the_versions_page_shows_the_figures_of_the_judge_that_decided():
    from django.contrib import admin

    from conversations.admin.verifiers import DuplicateModelVersionAdmin

    shown = DuplicateModelVersionAdmin(DuplicateModelVersion, admin.site).held_out_shown
    everything = {"held_out": {"precision": 0.88, "recall": 0.3}, "active_held_out": {"precision": 0.9, "recall": 0.2}}
    weighted = {"new": {"precision": 0.93, "recall": 0.41}, "active_recall_at_target": 0.33}
    assert (
        shown(DuplicateModelVersion(figures={**everything, "judge": "held_out_labels"})) == "0.88 / 0.30 vs 0.90 / 0.20"
    )
    assert (
        shown(
            DuplicateModelVersion(
                figures={**everything, "judge": "random_picks_weighted", "judges": {"random_picks_weighted": weighted}}
            )
        )
        == "0.93 / 0.41 vs R 0.33 (queue picks, weighted)"
    )
    # The decision in use at the cut it serves with, when the judge figured it.
    applied = {**weighted, "active_at_its_cut": {"precision": 0.97, "recall": 0.03}}
    assert (
        shown(
            DuplicateModelVersion(
                figures={**everything, "judge": "random_picks_weighted", "judges": {"random_picks_weighted": applied}}
            )
        )
        == "0.93 / 0.41 vs 0.97 / 0.03 (queue picks, weighted)"
    )
    assert shown(DuplicateModelVersion(figures={})) == ""


def test_the_versions_page_shows_which_labels_chose_the_cut():
    from django.contrib import admin

    from conversations.admin.verifiers import DuplicateModelVersionAdmin

    shown = DuplicateModelVersionAdmin(DuplicateModelVersion, admin.site).cut_shown
    on_picks = {"cut": 0.61234, "cut_chosen_on": "random_picks_weighted", "cut_chosen_on_labels": 180}
    assert shown(DuplicateModelVersion(figures=on_picks)) == "0.612 (180 training queue picks, weighted)"
    on_labels = {"cut": 0.85, "cut_chosen_on": "training_labels", "cut_chosen_on_labels": 700}
    assert shown(DuplicateModelVersion(figures=on_labels)) == "0.850 (700 training labels, unweighted)"
    bounded = {**on_picks, "cut_precision_lower_bound": 0.9012}
    assert shown(DuplicateModelVersion(figures=bounded)) == (
        "0.612 (180 training queue picks, weighted; precision there, 90% lower bound 0.901)"
    )
    # A version trained before the random picks chose cuts had its cut chosen on every training label.
    assert shown(DuplicateModelVersion(figures={"cut": 0.9})) == "0.900 (training labels, unweighted)"
    assert shown(DuplicateModelVersion(figures={"cut": None})) == ""


# --- the cut (pure) ------------------------------------------------------------------------------------------------


def _scored(*groups: tuple[int, float, int, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training labels' out-of-fold scores from groups of (count, score, is duplicate, random pick weight; 0: not a
    random pick)."""
    scores, labels, weights = [], [], []
    for count, score, duplicate, weight in groups:
        scores += [score] * count
        labels += [duplicate] * count
        weights += [weight] * count
    return np.array(scores), np.array(labels), np.array(weights, dtype=float)


# The traffic the random share samples: at 0.4 the model serves all 40 duplicates with 1 false hit (precision 0.98).
RANDOM_SCORED = ((30, 0.9, 1, 4.0), (10, 0.4, 1, 4.0), (1, 0.4, 0, 4.0), (50, 0.1, 0, 4.0))
# The near-gate picks, the hardest decisions: at 0.4 precision is 10 / 40; only at 0.9 does it reach the target.
NEAR_GATE_SCORED = ((20, 0.9, 1, 0.0), (10, 0.4, 1, 0.0), (30, 0.4, 0, 0.0), (40, 0.1, 0, 0.0))


def _cut(*groups: tuple[int, float, int, float]) -> tuple[float, CutChosenOn]:
    scores, labels, weights = _scored(*groups)
    return cut_choose(
        scores=scores,
        labels=labels,
        eligible=np.ones(len(labels), dtype=bool),
        random_weights=weights,
        precision_target=TARGET,
    )


def test_with_enough_random_picks_the_cut_is_the_lowest_that_meets_the_target_on_them():
    cut, chosen_on = _cut(*RANDOM_SCORED, *NEAR_GATE_SCORED)
    assert chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED
    assert cut == 0.4
    # Every training label, the near-gate picks with them, would have put it at 0.9, where the traffic loses a
    # quarter of its duplicates: the rule before this one.
    scores, labels, _ = _scored(*RANDOM_SCORED, *NEAR_GATE_SCORED)
    _, old_cut = recall_at_precision(
        scores=scores, labels=labels, eligible=np.ones(len(labels), dtype=bool), target=TARGET + 0.02
    )
    assert old_cut == 0.9


def test_the_rules_picks_count_once_beside_the_random_ones_as_the_traffic_they_are_part_of():
    # The queue draws its random share from what its rules left, so the random picks never stand for the near-gate
    # picks. Counted once each beside them, those add the 40 pairs at 0.4 the random picks miss: precision there is
    # (160 + 10) / (164 + 40) = 0.83, and the cut goes up to 0.9. The random picks alone put it at 0.4.
    scores, labels, random_weights = _scored(*RANDOM_SCORED, *NEAR_GATE_SCORED)
    traffic = np.where(random_weights > 0, random_weights, 1.0)
    chosen = cut_choose(
        scores=scores,
        labels=labels,
        eligible=np.ones(len(labels), dtype=bool),
        random_weights=random_weights,
        precision_target=TARGET,
        traffic_weights=traffic,
    )
    assert chosen == (0.9, CutChosenOn.RANDOM_PICKS_WEIGHTED)
    assert _cut(*RANDOM_SCORED, *NEAR_GATE_SCORED) == (0.4, CutChosenOn.RANDOM_PICKS_WEIGHTED)


def test_a_labels_traffic_weight_is_its_picks_inverse_chance_and_none_outside_the_queue():
    pair = LabelledQuestionPair(question="a", stored_question="b", is_duplicate=True, source="support", label_id=1)
    assert (pair.traffic_weight, pair.random_pick_weight) == (0.0, 0.0)  # given outside the queue
    drawn = replace(pair, pick_reason="random", pick_probability=0.2)
    assert drawn.traffic_weight == pytest.approx(5.0) and drawn.random_pick_weight == pytest.approx(5.0)
    ruled = replace(pair, pick_reason="near_gate", pick_probability=1.0)
    assert (ruled.traffic_weight, ruled.random_pick_weight) == (1.0, 0.0)
    unknown = replace(pair, pick_reason="near_gate", pick_probability=None)
    assert unknown.traffic_weight == 0.0


def test_with_too_few_random_duplicates_every_training_label_chooses_the_cut():
    few = ((MIN_RANDOM_JUDGE_DUPLICATES - 11, 0.9, 1, 4.0), *RANDOM_SCORED[1:])  # 29 duplicates among the picks
    cut, chosen_on = _cut(*few, *NEAR_GATE_SCORED)
    assert chosen_on == CutChosenOn.TRAINING_LABELS
    assert cut == 0.9
    # One more duplicate among the picks and they choose it (on 31 picks, 30 / 31 at 0.4 is not yet sure enough
    # to cut there; the picks alone choose the same).
    enough = ((MIN_RANDOM_JUDGE_DUPLICATES - 10, 0.9, 1, 4.0), *RANDOM_SCORED[1:])
    assert _cut(*enough, *NEAR_GATE_SCORED) == _cut(*enough)
    assert _cut(*enough)[1] == CutChosenOn.RANDOM_PICKS_WEIGHTED


def test_the_cut_weighs_each_random_pick_by_its_inverse_probability():
    # The false hit at 0.4 was drawn with a chance 25 times smaller than the rest: it stands for 100 of the traffic's
    # pairs against the 40 duplicates' 160, so precision at 0.4 is 160 / 260 and the cut goes up to 0.9.
    rare = ((30, 0.9, 1, 4.0), (10, 0.4, 1, 4.0), (1, 0.4, 0, 100.0), (50, 0.1, 0, 4.0))
    assert _cut(*rare, *NEAR_GATE_SCORED) == (0.9, CutChosenOn.RANDOM_PICKS_WEIGHTED)


def test_a_cut_whose_precision_reaches_the_target_only_by_chance_is_not_taken():
    # At 0.6 the picks' precision is 48 / 51 = 0.941, over the target plus the old fixed margin, but on 51 picks the
    # 90% lower bound is 0.88: a sample that size touches 0.94 by chance at a true precision under the target. At 0.9,
    # 40 of 40, the bound is 0.96, so the cut stays there.
    noisy = ((40, 0.9, 1, 4.0), (8, 0.6, 1, 4.0), (3, 0.6, 0, 4.0), (50, 0.1, 0, 4.0))
    assert _cut(*noisy) == (0.9, CutChosenOn.RANDOM_PICKS_WEIGHTED)
    # Ten times the picks at the same rates: the bound at 0.6 is 0.93 and the cut comes down to it.
    many = tuple((count * 10, score, label, weight) for count, score, label, weight in noisy)
    assert _cut(*many) == (0.6, CutChosenOn.RANDOM_PICKS_WEIGHTED)


def test_the_lower_bound_counts_heavily_weighted_picks_as_few():
    # 40 duplicates of 41 served, as 41 equal picks and as the same weight carried by 5 picks of 8.2 ... each.
    equal = precision_lower_bounds(
        true_weight=np.array([160.0]), weight=np.array([164.0]), square_weight=np.array([41 * 16.0])
    )
    few = precision_lower_bounds(
        true_weight=np.array([160.0]), weight=np.array([164.0]), square_weight=np.array([164.0**2 / 5])
    )
    assert 0.9 < equal[0] < 40 / 41 and few[0] < equal[0] - 0.1


def test_the_cut_falls_back_to_the_targets_point_estimate_and_is_inf_when_nothing_reaches_it():
    # At 0.4 the picks' precision is 40 / 44 = 0.909: over the target, its lower bound under it, and no higher cut is
    # over either, so the cut is 0.4 for the point estimate.
    tight = ((40, 0.4, 1, 4.0), (4, 0.4, 0, 4.0), (50, 0.1, 0, 4.0))
    assert _cut(*tight) == (0.4, CutChosenOn.RANDOM_PICKS_WEIGHTED)
    hopeless = ((40, 0.4, 1, 4.0), (40, 0.4, 0, 4.0))
    cut, chosen_on = _cut(*hopeless)
    assert chosen_on == CutChosenOn.RANDOM_PICKS_WEIGHTED and cut == float("inf")


# --- the activation judge (pure) -----------------------------------------------------------------------------------

TARGET = 0.90


def _labels(*groups: tuple[int, float, float, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Held-out labels from groups of (count, new model's score, active head's score, is duplicate)."""
    new, active, labels = [], [], []
    for count, new_score, active_score, duplicate in groups:
        new += [new_score] * count
        active += [active_score] * count
        labels += [duplicate] * count
    return np.array(new), np.array(active), np.array(labels)


# The traffic the random share samples: the new model at its cut 0.5 serves 36 of 40 duplicates with 2 false hits
# (precision 0.95, recall 0.90); the active head reaches precision 0.90 only on its top 22 (recall 0.50).
RANDOM_TRAFFIC = _labels(
    (16, 0.8, 0.9, 1), (20, 0.8, 0.3, 1), (4, 0.2, 0.9, 1), (2, 0.8, 0.9, 0), (38, 0.1, 0.3, 0), (20, 0.1, 0.1, 0)
)
# The near-gate picks: hard pairs where the new model at its cut is at precision 0.75, under the target.
NEAR_GATE = _labels((30, 0.8, 0.9, 1), (20, 0.2, 0.3, 1), (10, 0.8, 0.3, 0), (40, 0.1, 0.3, 0))


def _judge(random_part, near_part, *, random_weight: np.ndarray | float = 10.0):
    new = np.concatenate([random_part[0], near_part[0]])
    active = np.concatenate([random_part[1], near_part[1]])
    labels = np.concatenate([random_part[2], near_part[2]])
    weights = np.concatenate([np.broadcast_to(random_weight, len(random_part[2])), np.zeros(len(near_part[2]))])
    return activation_judge(
        new_scores=new,
        cut=0.5,
        active_scores=active,
        labels=labels,
        eligible=np.ones(len(labels), dtype=bool),
        random_weights=weights,
        precision_target=TARGET,
    )


def test_a_model_better_on_random_traffic_activates_though_worse_on_the_near_gate_labels():
    judged = _judge(RANDOM_TRAFFIC, NEAR_GATE)
    assert judged.judge == Judge.RANDOM_PICKS_WEIGHTED and judged.beats_active, judged.note
    weighted = judged.figures["random_picks_weighted"]
    assert weighted["new"]["precision"] == pytest.approx(36 / 38, abs=1e-4)
    assert weighted["new"]["recall"] == pytest.approx(0.9) and weighted["active_recall_at_target"] == 0.5
    # Every held-out label, near-gate ones and all, unweighted, would have refused it: under the target at its cut.
    assert judged.figures["held_out_labels"]["new"]["precision"] < TARGET
    # And with the random picks too few to judge, they do not: the old rule refuses it.
    few = tuple(np.concatenate([part[:25], part[40:]]) for part in RANDOM_TRAFFIC)  # 25 of the 40 duplicates
    fallback = _judge(few, NEAR_GATE)
    assert int(few[2].sum()) < MIN_RANDOM_JUDGE_DUPLICATES
    assert fallback.judge == Judge.HELD_OUT_LABELS and not fallback.beats_active
    assert "random_picks_weighted" in fallback.figures  # figured, not judging


def test_a_model_worse_on_random_traffic_is_refused_by_the_weighted_judge():
    # The active head's scores and the new model's swapped: the new one is the weaker on the traffic.
    swapped = (RANDOM_TRAFFIC[1], RANDOM_TRAFFIC[0], RANDOM_TRAFFIC[2])
    judged = _judge(swapped, NEAR_GATE)
    assert judged.judge == Judge.RANDOM_PICKS_WEIGHTED and not judged.beats_active


def test_the_weighted_judge_weighs_each_pick_by_its_inverse_probability():
    # The 2 false hits were drawn with a chance 20 times smaller than the rest: each stands for 20 times as much of
    # the traffic, so the model's precision at its cut is 36 / 76 there, not 36 / 38.
    rare = np.ones(len(RANDOM_TRAFFIC[2]))
    rare[40:42] = 20.0
    judged = _judge(RANDOM_TRAFFIC, NEAR_GATE, random_weight=rare)
    assert judged.judge == Judge.RANDOM_PICKS_WEIGHTED and not judged.beats_active
    assert judged.figures["random_picks_weighted"]["new"]["precision"] == pytest.approx(36 / 76, abs=1e-4)
    assert "under the target" in judged.note


def test_equal_served_duplicates_do_not_beat_the_active_decision():
    same = (RANDOM_TRAFFIC[0], RANDOM_TRAFFIC[0], RANDOM_TRAFFIC[2])
    judged = _judge(same, NEAR_GATE)
    assert judged.judge == Judge.RANDOM_PICKS_WEIGHTED and not judged.beats_active
    no_cut = activation_judge(
        new_scores=RANDOM_TRAFFIC[0],
        cut=float("inf"),
        active_scores=RANDOM_TRAFFIC[1],
        labels=RANDOM_TRAFFIC[2],
        eligible=np.ones(len(RANDOM_TRAFFIC[2]), dtype=bool),
        random_weights=np.full(len(RANDOM_TRAFFIC[2]), 10.0),
        precision_target=TARGET,
    )
    assert not no_cut.beats_active and "no cut" in no_cut.note


def _held_out_judge(groups, *, copies: int = 1):
    """The judge on held-out labels of `groups` (each count times `copies`), none of them a random pick."""
    return _judge(_labels(), _labels(*[(count * copies, *rest) for count, *rest in groups]))


# 47 held-out labels: the new model serves 13 duplicates with no false hit, the active head 11 at its best cut; they
# differ on 3 duplicates only the new model serves and 1 only the active head serves.
FEW_DISCORDANT = ((3, 0.8, 0.1, 1), (1, 0.1, 0.8, 1), (10, 0.8, 0.8, 1), (2, 0.1, 0.1, 1), (31, 0.1, 0.1, 0))


def test_a_gain_of_a_few_served_duplicates_does_not_swap_the_decision():
    judged = _held_out_judge(FEW_DISCORDANT)
    verdict = judged.figures["held_out_labels"]
    assert verdict["new"]["precision"] == 1.0 and verdict["served_gain"] == 2
    assert verdict["served_gain_lower_bound"] <= 0
    assert not judged.beats_active and "too few served duplicates to tell from chance" in judged.note
    # The same proportions over ten times the labels are no longer chance: the model activates.
    more = _held_out_judge(FEW_DISCORDANT, copies=10)
    assert more.figures["held_out_labels"]["served_gain_lower_bound"] > 0
    assert more.beats_active, more.note


# Random picks (weight 10): the new model's own cut 0.9 serves 20 of 40 duplicates, no false hit; at its best cut on
# these labels (0.7) it would serve all 40 at precision 0.952. The active head at its own cut 0.8 serves 5; at its best
# cut on these labels (0.65) 30, at 0.909.
CONSERVATIVE_CUT = _labels(
    (5, 0.95, 0.85, 1),
    (15, 0.95, 0.65, 1),
    (10, 0.7, 0.65, 1),
    (10, 0.7, 0.3, 1),
    (2, 0.7, 0.3, 0),
    (3, 0.2, 0.65, 0),
    (55, 0.1, 0.1, 0),
)


def _judge_at(groups, *, cut: float, active_cut: float, random_weight: float, cut_confident: bool = False):
    new, active, labels = groups
    return activation_judge(
        new_scores=new,
        cut=cut,
        active_scores=active,
        labels=labels,
        eligible=np.ones(len(labels), dtype=bool),
        random_weights=np.full(len(labels), random_weight),
        precision_target=TARGET,
        active_cut=active_cut,
        cut_confident=cut_confident,
    )


def test_a_model_ranking_better_at_a_conservative_cut_beats_the_decision_as_applied():
    judged = _judge_at(CONSERVATIVE_CUT, cut=0.9, active_cut=0.8, random_weight=10.0)
    weighted = judged.figures["random_picks_weighted"]
    # Ranked each at its best cut on the judging labels: 40 duplicates against 30. As applied: 20 against 5.
    assert weighted["new_recall_at_target"] == 1.0 and weighted["active_recall_at_target"] == 0.75
    assert weighted["new"]["recall"] == 0.5 and weighted["active_at_its_cut"]["recall"] == 0.125
    assert weighted["served_gain_lower_bound"] > 0 and weighted["served_beyond_active_at_its_cut"] == 150.0
    # Its cut serves fewer than the active head re-cut at its best on these labels (20 against 30): an oracle cut,
    # which the decision in use does not serve at, does not hold it back.
    assert judged.judge == Judge.RANDOM_PICKS_WEIGHTED and judged.beats_active, judged.note
    # Applied at a cut serving no more than the active decision at its own, it does not beat it, however it ranks.
    tied = _judge_at(CONSERVATIVE_CUT, cut=0.9, active_cut=0.6, random_weight=10.0)
    assert not tied.beats_active and "no more than the active decision at its own cut" in tied.note


# Held-out labels, none a random pick: the active decision at its cut 0.5 serves 70 duplicates and 30 others
# (precision 0.70, under the target beyond chance); the new model at its cut 0.9 serves the first group only.
def _sliver(served: int):
    return _labels((served, 0.95, 0.8, 1), (70 - served, 0.3, 0.8, 1), (30, 0.3, 0.8, 0), (50, 0.1, 0.1, 0))


def test_under_the_target_the_active_decision_loses_only_to_one_more_precise_beyond_chance():
    few = _judge_at(_sliver(3), cut=0.9, active_cut=0.5, random_weight=0.0)
    verdict = few.figures["held_out_labels"]
    assert verdict["active_precision_upper_bound"] < TARGET and verdict["new"]["precision"] == 1.0
    # 3 pairs served at precision 1.0: a lower bound under the active decision's upper one, as chance gives.
    assert verdict["new_precision_lower_bound"] < verdict["active_precision_upper_bound"]
    assert not few.beats_active and "not more precise beyond chance" in few.note
    many = _judge_at(_sliver(40), cut=0.9, active_cut=0.5, random_weight=0.0)
    assert many.figures["held_out_labels"]["new_precision_lower_bound"] > TARGET
    assert many.beats_active and "under the target" in many.note, many.note


# Random picks (weight 10): the new model at its cut 0.9 serves 26 duplicates and `false_hits` others; at its best
# cut on these labels (0.97) 20 duplicates alone. The active head serves 10 at its cut 0.8, all it can at the target.
def _near_target(false_hits: int):
    return _labels(
        (10, 0.97, 0.85, 1),
        (10, 0.97, 0.3, 1),
        (6, 0.95, 0.3, 1),
        (false_hits, 0.95, 0.3, 0),
        (10, 0.1, 0.3, 1),
        (50, 0.1, 0.3, 0),
    )


def _judge_near_target(false_hits: int, *, cut_confident: bool):
    return _judge_at(_near_target(false_hits), cut=0.9, active_cut=0.8, random_weight=10.0, cut_confident=cut_confident)


def test_a_cut_the_training_bound_set_needs_only_not_to_be_contradicted_on_the_held_out_labels():
    # 26 of 30 at its cut: 0.867 on the held-out labels, a point estimate under the target, and a reading a true
    # 0.92 gives one time in five on so few.
    confident = _judge_near_target(4, cut_confident=True)
    weighted = confident.figures["random_picks_weighted"]
    assert weighted["new"]["precision"] == pytest.approx(26 / 30, abs=1e-4)
    assert weighted["new_precision_upper_bound"] >= TARGET and weighted["cut_confident"] is True
    assert confident.beats_active, confident.note
    # A cut that fell back to the training labels' point estimate has shown nothing: the held-out one must reach it.
    fallback = _judge_near_target(4, cut_confident=False)
    assert not fallback.beats_active and "was not set at a lower bound" in fallback.note
    # Under the target beyond chance (26 of 38), a confident cut is refused too.
    under = _judge_near_target(12, cut_confident=True)
    assert under.figures["random_picks_weighted"]["new_precision_upper_bound"] < TARGET
    assert not under.beats_active and "beyond chance" in under.note, under.note


def test_the_gain_bound_is_reproducible_and_weighs_each_label():
    gain = np.array([1.0, 1.0, -1.0, 0.0] * 20)
    assert served_gain_lower_bound(gain=gain) == served_gain_lower_bound(gain=gain)
    assert served_gain_lower_bound(gain=gain * 10) == pytest.approx(10 * served_gain_lower_bound(gain=gain))
    assert served_gain_lower_bound(gain=gain) < gain.sum()
    assert served_gain_lower_bound(gain=np.array([])) == float("-inf")


# --- which version decides -----------------------------------------------------------------------------------------


def test_rollback_goes_back_one_version_then_to_the_shipped_head(tenant):
    first, second = trained_version(tenant), trained_version(tenant)
    duplicate_model_activate(tenant=tenant, version_id=first.pk)
    duplicate_model_activate(tenant=tenant, version_id=second.pk)
    assert tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active.version_id == second.pk
    assert duplicate_model_rollback(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).pk == first.pk
    assert tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active.version_id == first.pk
    assert duplicate_model_rollback(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME) is None
    assert tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active == decisions.Verifier()
    statuses = set(DuplicateModelVersion.objects.for_tenant(tenant).values_list("status", flat=True))
    assert statuses == {DuplicateModelStatus.RETIRED}


def test_a_tenants_model_never_decides_for_another_and_its_files_are_never_read(tenant, other_tenant, monkeypatch):
    mine = trained_version(tenant)
    duplicate_model_activate(tenant=tenant, version_id=mine.pk)
    theirs = trained_version(other_tenant)
    # a file in the other tenant's place that claims to be this tenant's is refused too
    verifier_path(tenant=other_tenant, version=theirs.version).write_text(
        verifier_path(tenant=tenant, version=mine.version).read_text()
    )
    duplicate_model_activate(tenant=other_tenant, version_id=theirs.pk)
    tenant_verifiers._models.clear()
    read = []
    real_read = Path.read_text

    def recording(self, *args, **kwargs):
        read.append(self)
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", recording)
    loaded = tenant_verifiers_load(tenant=other_tenant, embedding_model=BUNDLED_MODEL_NAME)
    assert loaded.active.version_id is None  # refused: the file names another tenant; the shipped head decides
    assert read and all(
        f"tenant-{other_tenant.pk}" in str(path) for path in read if "duplicate_model.json" not in str(path)
    )
    with pytest.raises(ValueError, match="not tenant"):
        verifier_load(tenant=other_tenant, row=mine)
    assert tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME).active.version_id == mine.pk


@pytest.mark.parametrize("damage", ["missing", "corrupt", "wrong version"])
def test_a_missing_or_corrupt_model_file_falls_back_to_the_shipped_head_with_an_error(tenant, caplog, damage):
    row = trained_version(tenant)
    duplicate_model_activate(tenant=tenant, version_id=row.pk)
    path = verifier_path(tenant=tenant, version=row.version)
    if damage == "missing":
        path.unlink()
    elif damage == "corrupt":
        path.write_text('{"feature_version": "pair-v1", "weights": [1, 2')
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), "version": row.version + 1}))
    tenant_verifiers._models.clear()
    with caplog.at_level(logging.ERROR, logger="conversations.training.verifiers"):
        loaded = tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    assert loaded.active == decisions.Verifier()
    assert any("cannot be loaded" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


def test_shadow_needs_a_trained_inactive_version(tenant):
    row = trained_version(tenant)
    duplicate_model_activate(tenant=tenant, version_id=row.pk)
    with pytest.raises(Exception, match="only a trained, inactive one"):
        duplicate_model_shadow(tenant=tenant, version_id=row.pk)


# --- through the API -------------------------------------------------------------------------------------------------


@pytest.fixture
def kb(redis_available, milvus_server, tenant):
    return indexed_kb(tenant)


def test_every_audit_event_names_the_verifier_that_decided_and_the_shadows_verdict(api_client, kb, tenant):
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    ask(api_client, conversation_id, "How can I reset my password?")
    shipped = DedupEvent.objects.for_tenant(tenant).order_by("id").last()
    assert shipped.verifier_id is None and shipped.verifier_label == decisions.SHIPPED_VERIFIER_LABEL
    assert shipped.shadow_verifier_id is None

    active = trained_version(tenant)
    duplicate_model_activate(tenant=tenant, version_id=active.pk)
    never = trained_version(tenant, cut=1.0)  # would serve nothing
    duplicate_model_shadow(tenant=tenant, version_id=never.pk)
    body = ask(api_client, conversation_id, "How could I reset my password?")
    assert body["dedup"]["action"] == "served_cached"
    event = DedupEvent.objects.for_tenant(tenant).order_by("id").last()
    assert (event.verifier_id, event.verifier_label) == (active.pk, "tenant model v1")
    assert (event.shadow_verifier_id, event.shadow_verifier_hit) == (never.pk, False)
    assert event.shadow_verifier_probability == pytest.approx(event.pair_probability)
    assert event.shadow_verifier_passes_checks is False

    # The dashboard's what-if table gains the shadow's column: reviewed, the hit counts for the active decision only.
    DedupEvent.objects.for_tenant(tenant).filter(pk=event.pk).update(review_verdict="correct")
    today = timezone.localdate()
    gate = event.threshold
    (model,) = dashboard_what_if_models(tenant=tenant, start=today, end=today, current=gate)
    assert model.label == "v2 (shadow)" and model.sample == 1
    (current,) = [row for row in model.rows if row.is_current]
    assert current.hits == 0
    rows, _ = dashboard_what_if(tenant=tenant, start=today, end=today, current=gate)
    assert [row.hits for row in rows if row.is_current] == [1]


def test_a_corrupt_active_model_file_is_no_server_error(api_client, kb, tenant, caplog):
    row = trained_version(tenant)
    duplicate_model_activate(tenant=tenant, version_id=row.pk)
    verifier_path(tenant=tenant, version=row.version).write_text("not json")
    tenant_verifiers._models.clear()
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, "How do I reset my password?")
    with caplog.at_level(logging.ERROR):
        body = ask(api_client, conversation_id, "How do I reset my password?")
    assert body["dedup"]["action"] == "served_cached"
    event = DedupEvent.objects.for_tenant(tenant).order_by("id").last()
    assert event.verifier_id is None and event.verifier_label == decisions.SHIPPED_VERIFIER_LABEL
