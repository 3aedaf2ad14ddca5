"""The pair reader beside the bundled model's shipped head: its block in the head's file, the combination with the
head, the adapters file merged into the model as training ran it, its ONNX export, and the fallback to the head
alone when it cannot run. No database, no services; the bundled model's own files."""

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from django.core.management import CommandError, call_command

from conversations.dedup import decisions as d
from conversations.dedup import pair_reader
from conversations.dedup.duplicate_model import (
    MODEL_PATH,
    pair_model_default,
    pair_model_from_dict,
    pair_probability,
    regression_probability,
)
from conversations.dedup.pair_features import pair_features
from conversations.dedup.pair_reader import PairReader, combined_probability, pair_reader_from_dict
from conversations.training.pair_reader_training import adapters_add, adapters_write
from conversations.training.verifier_heads import decision_probabilities
from retrieval import cross_encoder
from retrieval.embeddings import embed_texts, model_path


def _reader(**changes: object) -> PairReader:
    block = {
        "weights": [1.5, 2.0],
        "mean": [0.5, -1.0],
        "scale": [2.0, 4.0],
        "bias": -0.25,
        "cut": 0.7,
        "adapters": "x.npz",
        "adapters_sha256": "0" * 64,
    }
    return pair_reader_from_dict({**block, **changes}, directory=Path("/nowhere"))


def test_the_combination_is_the_logistic_of_the_standardised_head_log_odds_and_reader_score():
    reader = _reader()
    head, score = 0.8, 1.0
    z = 1.5 * (np.log(0.8 / 0.2) - 0.5) / 2.0 + 2.0 * (1.0 + 1.0) / 4.0 - 0.25
    assert combined_probability(reader=reader, head_probability=head, reader_score=score) == pytest.approx(
        1 / (1 + np.exp(-z))
    )
    # Both parts push the same way, and a head that is certain does not overflow.
    assert combined_probability(reader=reader, head_probability=0.9, reader_score=1.0) > combined_probability(
        reader=reader, head_probability=0.8, reader_score=1.0
    )
    assert combined_probability(reader=reader, head_probability=0.8, reader_score=2.0) > combined_probability(
        reader=reader, head_probability=0.8, reader_score=1.0
    )
    assert 0.0 < combined_probability(reader=reader, head_probability=1.0, reader_score=-500.0) < 1.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"weights": [1.0]}, "two finite numbers"),
        ({"mean": [0.0, float("nan")]}, "two finite numbers"),
        ({"scale": [1.0, 0.0]}, "scale is positive"),
    ],
)
def test_a_malformed_reader_block_is_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        _reader(**changes)


@pytest.fixture
def reader_on(settings):
    settings.PAIR_READER = True


def test_the_shipped_head_carries_its_reader_and_a_tenants_copy_of_the_file_does_not(settings):
    head = pair_model_default()
    assert head.reader is not None
    settings.PAIR_READER = False  # the default: the head decides alone at its own cut
    assert head.active_reader is None and head.decision_cut == head.cut
    settings.PAIR_READER = True
    assert head.reader.adapters.is_file() and head.reader.adapters.parent == MODEL_PATH.parent
    assert head.reader.adapters.stat().st_size < 2 * 1024 * 1024
    assert cross_encoder.adapters_digest(head.reader.adapters) == head.reader.adapters_sha256
    assert 0.0 < head.reader.cut < 1.0 and head.decision_cut == head.reader.cut
    meta = head.reader.meta
    assert meta["data"] == head.meta["data"] and meta["data_sha256"] == head.meta["data_sha256"]
    assert {"precision", "recall", "hit_rate"} <= set(meta["held_out"]) and "smoke_run_limit" not in meta
    # A tenant's verifier file made from the shipped head's (as tests and imports make them) decides alone.
    tenant_copy = pair_model_from_dict(json.loads(MODEL_PATH.read_text(encoding="utf-8")))
    assert tenant_copy.reader is None and tenant_copy.decision_cut == tenant_copy.cut == head.cut


def _real_pair_features(question: str, stored: str, model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vectors = embed_texts([question, stored])
    features = pair_features(
        first=question,
        second=stored,
        first_vector=vectors[0],
        second_vector=vectors[1],
        feature_version=model.feature_version,
    )
    return vectors[0], vectors[1], features


def test_a_reader_that_cannot_run_leaves_the_head_alone_at_its_own_cut(reader_on, caplog):
    head = pair_model_default()
    missing = replace(head, reader=replace(head.reader, adapters=Path("/nowhere/reader.npz")))
    question, stored = "How do I reset my password?", "How can I reset my password?"
    _, _, features = _real_pair_features(question, stored, head)
    with caplog.at_level(logging.ERROR, logger="conversations.dedup.pair_reader"):
        probability, cut = d.decision_probability(
            model=missing, features=features, question=question, stored_question=stored
        )
        again = d.decision_probability(model=missing, features=features, question=question, stored_question=stored)
    assert (probability, cut) == again == (pair_probability(model=head, features=features), head.cut)
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1  # said once per process
    assert "decides alone" in caplog.records[0].message


def test_a_reader_whose_run_fails_leaves_the_head_alone_for_that_turn(reader_on, caplog, monkeypatch):
    head = pair_model_default()
    question, stored = "How do I reset my password?", "How can I reset my password?"
    _, _, features = _real_pair_features(question, stored, head)
    scorer = cross_encoder.pair_scorer(adapters=head.reader.adapters, sha256=head.reader.adapters_sha256)
    served = d.decision_probability(model=head, features=features, question=question, stored_question=stored)

    def broken(pairs, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : out of memory")

    monkeypatch.setattr(scorer, "scores", broken)
    monkeypatch.setattr(pair_reader, "_run_failed", set())
    with caplog.at_level(logging.ERROR, logger="conversations.dedup.pair_reader"):
        for _ in range(2):
            assert d.decision_probability(model=head, features=features, question=question, stored_question=stored) == (
                pair_probability(model=head, features=features),
                head.cut,
            )
    said = [r.message for r in caplog.records if r.name == "conversations.dedup.pair_reader"]
    assert len(said) == 1 and "failed while scoring" in said[0]  # once, not on every turn
    monkeypatch.undo()  # the run works again: the next turn reads the reader as before
    assert d.decision_probability(model=head, features=features, question=question, stored_question=stored) == served


def test_an_altered_adapters_file_is_not_run(reader_on, tmp_path):
    head = pair_model_default()
    altered = tmp_path / "reader.npz"
    altered.write_bytes(head.reader.adapters.read_bytes() + b"\0")
    model = replace(head, reader=replace(head.reader, adapters=altered))
    question, stored = "How do I reset my password?", "How can I reset my password?"
    _, _, features = _real_pair_features(question, stored, head)
    assert d.decision_probability(model=model, features=features, question=question, stored_question=stored) == (
        pair_probability(model=head, features=features),
        head.cut,
    )


def test_the_decision_with_the_reader_records_the_probability_it_served_by(settings):
    head = pair_model_default()
    question, stored = "How do I reset my password?", "How can I reset my password?"
    first, second, features = _real_pair_features(question, stored, head)
    alone = pair_probability(model=head, features=features)
    settings.PAIR_READER = False
    assert d.decision_probability(model=head, features=features, question=question, stored_question=stored) == (
        alone,
        head.cut,
    )
    settings.PAIR_READER = True
    probability, cut = d.decision_probability(model=head, features=features, question=question, stored_question=stored)
    assert cut == head.reader.cut and probability != alone
    # The reader combines with the regression it was fitted beside, not with the trees over it.
    score = pair_reader.reader_score(reader=head.reader, question=question, stored=stored)
    regression = regression_probability(model=head, features=features)
    assert head.trees is not None and regression != alone
    assert probability == pytest.approx(
        pair_reader.combined_probability(reader=head.reader, head_probability=regression, reader_score=score)
    )
    decision = d.duplicate_decide(
        question=question,
        question_vector=first,
        previous_vector=None,
        candidates=[d.StoredQuestion(turn_id=1, question=stored, vector=second, conversation_id=1)],
        threshold=0.76,
    )
    assert decision.hit and decision.probability == pytest.approx(probability) and probability >= cut


def test_adapters_written_and_merged_score_as_the_adapted_model_did(tmp_path):
    root = model_path()
    torch.manual_seed(0)
    model = cross_encoder.sequence_model(root)
    factors = adapters_add(model, rank=2)
    with torch.no_grad():
        for _down, up in factors.values():
            up.normal_(0.0, 0.02)  # as if trained: a zero update would leave nothing to merge
        model.get_parameter("classifier.weight").normal_(0.0, 0.5)
    model.eval()
    tokenizer = cross_encoder.pair_tokenizer(root)
    pairs = [("How do I reset my password?", "I forgot my password"), ("Is the app free?", "What does it cost?")]
    adapted = cross_encoder.PairScorer(run=cross_encoder.torch_run(model), tokenizer=tokenizer).scores(pairs)
    out = tmp_path / "adapters.npz"
    adapters_write(model=model, factors=factors, out=out)
    merged = cross_encoder.merged_model(root=root, adapters=out)
    scores = cross_encoder.PairScorer(run=cross_encoder.torch_run(merged), tokenizer=tokenizer).scores(pairs)
    assert np.abs(scores - adapted).max() < 0.02  # the file keeps fp16
    assert np.abs(adapted).max() > 0.05  # the update is not nothing
    swapped = cross_encoder.PairScorer(run=cross_encoder.torch_run(merged), tokenizer=tokenizer).scores(
        [(b, a) for a, b in pairs]
    )
    assert np.allclose(swapped, scores, atol=1e-5)  # either order gives the same score


def test_an_adapters_file_of_something_else_is_a_clear_error(tmp_path):
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong.open("wb"), nothing=np.zeros(3))
    with pytest.raises(cross_encoder.CrossEncoderUnavailable, match="is not adapters of this model"):
        cross_encoder.merged_model(root=model_path(), adapters=wrong)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a file of arrays")
    with pytest.raises(cross_encoder.CrossEncoderUnavailable, match="cannot be read"):
        cross_encoder.merged_model(root=model_path(), adapters=garbage)


def test_the_onnx_export_gives_pytorchs_scores(settings, tmp_path, monkeypatch):
    head = pair_model_default()
    settings.EMBEDDING_ONNX_DIR = tmp_path
    settings.EMBEDDING_BACKEND = "onnx"
    monkeypatch.setattr(cross_encoder, "_scorers", {})
    named = {"adapters": head.reader.adapters, "sha256": head.reader.adapters_sha256}
    pairs = [("Why is the sky blue?", "What makes the sky blue?"), ("How do I cancel?", "How do I subscribe?")]
    onnx_scores = cross_encoder.pair_scorer(**named).scores(pairs)
    assert len(list(tmp_path.glob("*+reader-*.onnx"))) == 1
    settings.EMBEDDING_BACKEND = "torch"
    monkeypatch.setattr(cross_encoder, "_scorers", {})
    torch_scores = cross_encoder.pair_scorer(**named).scores(pairs)
    assert np.abs(onnx_scores - torch_scores).max() < cross_encoder.EXPORT_MAX_DIFFERENCE
    assert onnx_scores[0] > onnx_scores[1]  # a paraphrase over a reversal of intent


def test_judging_reads_the_decision_turns_get_with_or_without_the_reader(settings):
    """A tenant's verifier is judged against the active decision (`verifier_training._judge`): its probabilities for
    a batch of labels are those the turn's decision reads one pair at a time, reader and all."""
    head = pair_model_default()
    pairs = [
        ("How do I reset my password?", "How can I reset my password?"),
        ("What time does the store open on Sunday?", "What time does the store close on Sunday?"),
        ("How do I track my order?", "How do I return my order?"),
    ]
    features = np.array([_real_pair_features(a, b, head)[2] for a, b in pairs])
    for on in (False, True):
        settings.PAIR_READER = on
        batch, cut = decision_probabilities(head, features, pairs)
        one_by_one = [
            d.decision_probability(model=head, features=row, question=a, stored_question=b)
            for row, (a, b) in zip(features, pairs, strict=True)
        ]
        assert cut == head.decision_cut and all(c == cut for _, c in one_by_one)
        assert np.allclose(batch, [p for p, _ in one_by_one], atol=1e-6)


@pytest.mark.parametrize("option", ["--rank", "--epochs"])
def test_the_training_command_refuses_a_size_of_nothing(option):
    with pytest.raises(CommandError, match=f"{option} must be at least 1"):
        call_command("pair_reader_train", option, "0")
