"""Encoding many texts: batches of similar token lengths, so the model computes as little padding as it can."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval import embeddings
from retrieval.embeddings import encode_batches


@pytest.mark.parametrize(
    ("lengths", "batch_size", "expected"),
    [
        ([], 4, []),
        ([5], 4, [[0]]),
        ([3, 9, 1, 7], 2, [[1, 3], [0, 2]]),
        ([3, 9, 1, 7], 3, [[1, 3, 0], [2]]),
        ([3, 9, 1, 7], 10, [[1, 3, 0, 2]]),
        ([4, 4, 8, 4], 2, [[2, 0], [1, 3]]),  # ties keep their input order
        ([2, 1], 0, [[0], [1]]),  # a batch size below 1 is read as 1
    ],
)
def test_encode_batches_are_longest_first_and_at_most_the_batch_size(lengths, batch_size, expected):
    assert encode_batches(lengths, batch_size) == expected


def test_every_text_is_in_exactly_one_batch():
    lengths = [(index * 37) % 11 for index in range(50)]
    batches = encode_batches(lengths, 8)
    assert sorted(index for batch in batches for index in batch) == list(range(50))
    assert all(len(batch) <= 8 for batch in batches)
    longest_first = [lengths[index] for batch in batches for index in batch]
    assert longest_first == sorted(lengths, reverse=True)


def test_texts_are_batched_by_token_length_not_characters_and_come_back_in_order(monkeypatch, embedding_backend):
    # Sorted by characters (sentence-transformers' own order), each batch of two would pair a 100-token text with a
    # 40-token one and encode 60 padding tokens; sorted by tokens, no batch needs padding.
    long_spaced, long_dense = ". " * 100, "." * 100
    short_spaced, short_dense = "the " * 40, "a " * 40
    texts = [short_dense, long_spaced, short_spaced, long_dense]
    assert [len(text) for text in (long_spaced, short_spaced, long_dense, short_dense)] == [200, 160, 100, 80]
    assert embeddings.token_counts(texts) == [40, 100, 40, 100]
    model = embeddings.embedding_model()
    alone = np.vstack([embeddings.embed_texts([text]) for text in texts])
    padding: list[int] = []
    hook = "features" if embedding_backend == "onnx" else "preprocess"  # where each backend makes the model's input
    make_input = getattr(model, hook)

    def counting(*args, **kwargs):
        features = make_input(*args, **kwargs)
        mask = np.asarray(features["attention_mask"])
        padding.append(int(mask.size - mask.sum()))
        return features

    monkeypatch.setattr(model, hook, counting)
    vectors = embeddings.embed_texts(texts, batch_size=2)

    assert padding == [0, 0]
    np.testing.assert_allclose(vectors, alone, atol=1e-5)
