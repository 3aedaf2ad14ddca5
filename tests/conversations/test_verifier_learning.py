"""What a tenant's verifier learns beyond the shipped head: where shared words sit (pair-v3's order features), a
tree head that is exactly the classifier it was fitted as, a cosine gate of its own, and on traffic of swapped roles
(PAWS-like pairs, where the shipped head serves wrong answers) activation, shadow and rollback, never for another
tenant."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conversations.dedup import decisions, tenant_verifiers
from conversations.dedup.duplicate_model import (
    LINEAR_KIND,
    MODEL_PATH,
    TREES_KIND,
    pair_model_default,
    pair_model_from_dict,
    tree_ensemble_from_dict,
)
from conversations.dedup.pair_features import (
    FEATURE_VERSION,
    ORDER_FEATURE_VERSION,
    PAIR_V3_FEATURES,
    pair_order_features,
)
from conversations.dedup.tenant_verifiers import tenant_verifiers_load, verifier_path
from conversations.models import DuplicateModelStatus
from conversations.training.boosted_trees import TREE_PARAMETERS, trees_export
from conversations.training.labelled_pairs import labelled_pairs_read
from conversations.training.verifier_heads import Candidate
from conversations.training.verifier_training import _form_and_gate_choose, _Labelled, gate_candidates
from conversations.training.verifiers import (
    duplicate_model_rollback,
    duplicate_model_shadow,
    duplicate_model_train,
    duplicate_model_version_create,
)
from retrieval.embeddings import BUNDLED_MODEL_NAME, embed_texts

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def model_dir(settings, tmp_path: Path) -> Path:
    settings.DUPLICATE_MODEL_DIR = tmp_path / "duplicate_models"
    tenant_verifiers._models.clear()
    return settings.DUPLICATE_MODEL_DIR


def test_order_features_see_the_same_words_in_other_roles():
    swapped = dict(
        zip(
            PAIR_V3_FEATURES,
            pair_order_features(
                "Will a message say blocked if you were delivered?", "Will a message say delivered if you were blocked?"
            ),
            strict=True,
        )
    )
    # 9 words, the same bag: the longest common subsequence leaves out both swapped words.
    assert swapped["word_lcs_ratio"] == pytest.approx(7 / 9)
    assert swapped["shared_words_out_of_sequence"] == pytest.approx(2 / 9)
    assert swapped["word_context_jaccard"] < 0.6 and swapped["word_displacement"] > 0.0
    same = pair_order_features("How do I reset my password?", "how do i reset my password")
    np.testing.assert_allclose(same, [1.0, 0.0, 1.0, 0.0])
    # symmetric in the pair
    np.testing.assert_allclose(
        pair_order_features("Why is the sky blue at noon?", "At noon why is the sky blue?"),
        pair_order_features("At noon why is the sky blue?", "Why is the sky blue at noon?"),
    )


# Pairs whose shared words are many, in several orders, in English and Chinese.
_HASHING_PAIRS = (
    ("Will a message say blocked if you were delivered?", "Will a message say delivered if you were blocked?"),
    ("how can i learn to cook rice and beans quickly", "quickly learn how to cook beans and rice"),
    ("为什么我的信用卡还款没有到账", "信用卡还款为什么还没有到账呢"),
)


def test_the_pair_features_are_the_same_bits_in_every_process():
    # A set's order follows the process's string hashing; a feature summed in that order differs in its last bit
    # between processes, the tree head bins it otherwise, and the same labels train another version.
    import subprocess
    import sys

    script = (
        "import sys, json\n"
        "from conversations.dedup.pair_features import pair_lexical_features, pair_extra_features, "
        "pair_order_features\n"
        "for a, b in json.loads(sys.argv[1]):\n"
        "    for f in (pair_lexical_features, pair_extra_features, pair_order_features):\n"
        "        print(f(a, b).tobytes().hex())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script, json.dumps(_HASHING_PAIRS)],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[2],
        ).stdout
        for seed in (1, 2, 3, 4)
    }
    assert len(outputs) == 1, outputs


def test_the_tree_head_is_the_classifier_it_was_fitted_as():
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(3)
    rows = rng.normal(size=(600, 6))
    labels = ((rows[:, 0] > 0.2) ^ (rows[:, 3] * rows[:, 1] > 0.1)).astype(int)
    classifier = HistGradientBoostingClassifier(**TREE_PARAMETERS).fit(rows, labels)
    ensemble = tree_ensemble_from_dict(json.loads(json.dumps(trees_export(classifier, inputs=6).to_dict())))
    fresh = rng.normal(size=(300, 6))
    np.testing.assert_allclose(
        [ensemble.raw(row) for row in fresh], classifier.decision_function(fresh), rtol=1e-9, atol=1e-9
    )


def test_a_tree_file_that_does_not_form_trees_is_refused():
    good = {
        "baseline": 0.1,
        "inputs": 2,
        "roots": [0],
        "feature": [1, 0, 0],
        "threshold": [0.5, 0.0, 0.0],
        "left": [1, 0, 0],
        "right": [2, 0, 0],
        "value": [0.0, -1.0, 1.0],
        "leaf": [0, 1, 1],
    }
    ensemble = tree_ensemble_from_dict(good)
    assert ensemble.raw(np.array([0.0, 0.4])) == pytest.approx(-0.9)
    assert ensemble.raw(np.array([0.0, 0.6])) == pytest.approx(1.1)
    for broken in (
        {"left": [0, 0, 0]},  # a split pointing at itself would loop
        {"feature": [2, 0, 0]},  # an input the rows do not have
        {"right": [3, 0, 0]},  # a node outside the arrays
        {"value": [0.0, 1.0]},  # arrays of different lengths
    ):
        with pytest.raises(ValueError, match="tree head"):
            tree_ensemble_from_dict({**good, **broken})
    shipped = json.loads(MODEL_PATH.read_text())
    payload = {**shipped, "kind_of_head": TREES_KIND, "feature_version": ORDER_FEATURE_VERSION, "trees": good}
    payload["linear_feature_version"] = shipped.get("linear_feature_version", shipped["feature_version"])
    with pytest.raises(ValueError, match="tree head reads 2 inputs"):
        pair_model_from_dict(payload)
    with pytest.raises(ValueError, match="kind"):
        pair_model_from_dict({**payload, "kind_of_head": "forest"})


def test_a_verifier_with_a_gate_of_its_own_serves_under_the_policys_threshold():
    question, stored = "How can I get my money back?", "How do I ask for a refund?"
    vectors = embed_texts([question, stored])
    cosine = float(vectors[0] @ vectors[1])
    candidate = decisions.StoredQuestion(1, stored, vectors[1], 1, None)
    head = replace(pair_model_default(), cut=0.0)  # serves whatever the gate lets through, to isolate the gate
    common = {"question": question, "question_vector": vectors[0], "previous_vector": None, "candidates": [candidate]}
    threshold = cosine + 0.05
    without = decisions.duplicate_decide(threshold=threshold, pair_model=head, **common)
    assert not without.hit and without.reason == "below threshold" and without.gate == pytest.approx(threshold)
    lower = decisions.duplicate_decide(threshold=threshold, pair_model=replace(head, gate=cosine - 0.01), **common)
    assert lower.hit and lower.gate == pytest.approx(cosine - 0.01)
    # A gate above the policy's threshold does not raise it: the threshold stays the highest gate.
    higher = decisions.duplicate_decide(threshold=cosine - 0.02, pair_model=replace(head, gate=0.99), **common)
    assert higher.hit and higher.gate == pytest.approx(cosine - 0.02)
    assert gate_candidates(0.76) == [0.76, 0.72, 0.68, 0.64, 0.6, 0.56, 0.5]
    assert gate_candidates(0.52) == [0.52]


def test_the_regression_competes_at_the_lowest_gate_and_the_trees_at_any():
    # 20 pairs over the policy's threshold and 20 near the floor, half duplicates each. Both heads rank the pairs
    # over the threshold right and those near the floor backwards, so a higher gate serves more at precision 0.90.
    cosine = np.repeat([0.8, 0.55], 20)
    labels = np.tile(np.repeat([1, 0], 10), 2)
    misranked = np.concatenate([np.repeat([0.8, 0.1], 10), np.repeat([0.2, 0.9], 10)])
    data = _Labelled(
        labels=labels,
        held_out=np.zeros(40, dtype=bool),
        random_weights=np.zeros(40),
        traffic_weights=np.zeros(40),
        folds=np.arange(40) % 5,
        cosine=cosine,
        checks=np.ones(40, dtype=bool),
    )
    gates = gate_candidates(0.76)
    regression = Candidate(kind=LINEAR_KIND, oof=misranked, penalty=1.0, added_penalty=1.0)
    useless_trees = Candidate(kind=TREES_KIND, oof=np.full(40, 0.5))
    chosen, gate, table = _form_and_gate_choose(
        candidates=[regression, useless_trees], gates=gates, data=data, precision_target=0.9
    )
    assert chosen is regression and gate == 0.5
    # The reader still sees what the regression would reach at the threshold: half the duplicates, against none.
    assert table[f"{LINEAR_KIND}@0.76"] == 0.5 and table[f"{LINEAR_KIND}@0.50"] == 0.0
    trees = Candidate(kind=TREES_KIND, oof=misranked)
    chosen, gate, _ = _form_and_gate_choose(
        candidates=[regression, trees], gates=gates, data=data, precision_target=0.9
    )
    assert chosen is trees and gate == 0.76


# Traffic of swapped roles, as PAWS-QQP's: a question and the same words with two of them exchanged (the last two
# also put in another order, which no rule reads), a different question; and the same question in other words, a
# duplicate. The shipped head, fitted on QQP, calls most swaps duplicates (they share every word).
SWAPS = (
    ("Can I move money from {a} to {b}?", "Can I move money from {b} to {a}?"),
    ("Is {a} cheaper than {b}?", "Is {b} cheaper than {a}?"),
    ("Will {a} still work if I cancel {b}?", "If I cancel {a}, will {b} still work?"),
    ("Why does {a} stop when {b} starts?", "When {a} starts, why does {b} stop?"),
)
PARAPHRASES = (
    ("Can I move money from {a} to {b}?", "Is it possible to transfer money from {a} to {b}?"),
    ("Is {a} cheaper than {b}?", "Does {a} cost less than {b}?"),
    ("Will {a} still work if I cancel {b}?", "If I cancel {b}, does {a} keep working?"),
    ("Why does {a} stop when {b} starts?", "What makes {a} stop as soon as {b} starts?"),
)
THINGS = (
    "my savings account", "the premium plan", "the mobile app", "my credit card", "the family plan", "the web app",
    "my checking account", "the basic plan", "the desktop client", "my debit card", "the team plan", "the API",
)  # fmt: skip


def _role_traffic(tmp_path: Path, *, pairs: int = 360, seed: int = 5) -> Path:
    rng = random.Random(seed)
    path = tmp_path / f"roles-{seed}.jsonl"
    with path.open("w") as handle:
        for number in range(pairs):
            a, b = rng.sample(THINGS, 2)
            template = rng.randrange(len(SWAPS))
            duplicate = rng.random() < 0.4
            first, second = (PARAPHRASES if duplicate else SWAPS)[template]
            row = {
                "pair_id": f"{seed}-{number}",
                "question1": second.format(a=a, b=b),
                "question2": first.format(a=a, b=b),
                "is_duplicate": int(duplicate),
            }
            handle.write(json.dumps(row) + "\n")
    return path


def _train(tenant, path: Path):
    row = duplicate_model_version_create(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME, source=str(path))
    return duplicate_model_train(tenant=tenant, version_id=row.pk, pairs=labelled_pairs_read(path))


def _served(tenant, question: str, stored: str) -> bool:
    loaded = tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    vectors = embed_texts([question, stored])
    return decisions.duplicate_decide_verified(
        verifier=loaded.active,
        shadow=loaded.shadow,
        question=question,
        question_vector=vectors[0],
        previous_vector=None,
        candidates=[decisions.StoredQuestion(1, stored, vectors[1], 1, None)],
        threshold=0.76,
    ).hit


def test_on_swapped_role_traffic_a_tree_head_activates_shadows_and_rolls_back(tenant, other_tenant, tmp_path):
    # A move or a comparison the other way round is refused by the rules before any head
    # (question_pairs.direction_reversed, comparison_reversed), as is any swap in the same order (words_swapped); a
    # swap put in another order is the heads' to tell.
    for template in SWAPS[:2]:
        assert not _served(
            tenant,
            template[1].format(a="the web app", b="my debit card"),
            template[0].format(a="the web app", b="my debit card"),
        )
    swap = (
        SWAPS[2][1].format(a="the web app", b="my debit card"),
        SWAPS[2][0].format(a="the web app", b="my debit card"),
    )
    paraphrase = (
        PARAPHRASES[2][1].format(a="the web app", b="my debit card"),
        PARAPHRASES[2][0].format(a="the web app", b="my debit card"),
    )
    assert _served(tenant, *swap)  # the shipped head serves the swapped question another question's answer

    row = _train(tenant, _role_traffic(tmp_path))
    assert row.status == DuplicateModelStatus.ACTIVE, row.decision_note
    # whichever head its labels chose (out-of-fold), the file says so and reads back as that head
    written = json.loads(verifier_path(tenant=tenant, version=row.version).read_text())
    assert written.get("kind_of_head", LINEAR_KIND) == row.figures["kind_of_head"] in (LINEAR_KIND, TREES_KIND)
    assert set(row.figures["out_of_fold_recall_at_target"]) >= {f"{TREES_KIND}@0.76", f"{LINEAR_KIND}@0.76"}
    assert row.figures["held_out"]["precision"] >= row.figures["precision_target"]
    assert not _served(tenant, *swap) and _served(tenant, *paraphrase)
    # never for another tenant: its turns are decided by the shipped head
    assert tenant_verifiers_load(tenant=other_tenant, embedding_model=BUNDLED_MODEL_NAME).active.version_id is None
    assert _served(other_tenant, *swap)

    # rolled back, the shipped head decides again; the version, in shadow, is recorded beside it and never applied
    duplicate_model_rollback(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    tenant_verifiers._models.clear()
    assert tenant_verifiers_load(
        tenant=tenant, embedding_model=BUNDLED_MODEL_NAME
    ).active.version_id is None and _served(tenant, *swap)
    duplicate_model_shadow(tenant=tenant, version_id=row.pk)
    loaded = tenant_verifiers_load(tenant=tenant, embedding_model=BUNDLED_MODEL_NAME)
    vectors = embed_texts(list(swap))
    decided = decisions.duplicate_decide_verified(
        verifier=loaded.active,
        shadow=loaded.shadow,
        question=swap[0],
        question_vector=vectors[0],
        previous_vector=None,
        candidates=[decisions.StoredQuestion(1, swap[1], vectors[1], 1, None)],
        threshold=0.76,
    )
    assert decided.hit and decided.shadow is not None and decided.shadow.verifier_version_id == row.pk
    assert decided.shadow.hit is False


def test_a_tree_verifier_over_the_shipped_tree_head_reads_the_shipped_regression(tenant, tmp_path, monkeypatch):
    """The bundled model's shipped head is trees over a regression: a verifier starts from that regression (its weights,
    its pair-v1 features), and a verifier whose labels choose trees writes a file that reads back, its trees over the
    shipped regression's log-odds. The labels' choice is forced to the trees here, so the test does not hang on which
    head these labels prefer."""
    from conversations.training import verifier_training

    choose = verifier_training._form_and_gate_choose

    def trees_chosen(*, candidates, gates, data, precision_target):
        _, _, table = choose(candidates=candidates, gates=gates, data=data, precision_target=precision_target)
        return next(c for c in candidates if c.kind == TREES_KIND), min(gates), table

    monkeypatch.setattr(verifier_training, "_form_and_gate_choose", trees_chosen)
    shipped = pair_model_default()
    assert shipped.trees is not None
    row = _train(tenant, _role_traffic(tmp_path))
    assert row.status != DuplicateModelStatus.FAILED, row.error
    written = json.loads(verifier_path(tenant=tenant, version=row.version).read_text())
    assert written["kind_of_head"] == TREES_KIND and written["linear_feature_version"] == FEATURE_VERSION
    assert written["weights"] == pytest.approx(shipped.weights.tolist()) and written["bias"] == shipped.bias
    verifier = pair_model_from_dict(written)
    assert verifier.trees is not None and verifier.trees is not shipped.trees


def test_a_verifier_learns_in_the_model_of_the_tenants_knowledge_bases(tenant):
    from conversations.training.verifiers import verifier_embedding_model
    from retrieval.embeddings import USE_MODEL_NAME, embedding_dimension
    from retrieval.embeddings import model_name as default_model
    from retrieval.models import KnowledgeBase

    assert verifier_embedding_model(tenant=tenant) == default_model()  # no knowledge base yet
    KnowledgeBase.objects.create(
        tenant=tenant,
        name="zh",
        embedding_model=USE_MODEL_NAME,
        embedding_dimension=embedding_dimension(USE_MODEL_NAME),
    )
    assert verifier_embedding_model(tenant=tenant) == USE_MODEL_NAME  # the one model all its knowledge bases use
    KnowledgeBase.objects.create(tenant=tenant, name="en")
    assert verifier_embedding_model(tenant=tenant) == default_model()  # two models: the deployment's default
