"""The USE multilingual adapter: unit vectors that read Chinese, its own token counts, and a model directory that
cannot be read is a 503 (EmbeddingModelUnavailable), never a bare exception."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from retrieval import embedding_use
from retrieval.embedding_use import DIMENSION, UseEncoder
from retrieval.embeddings import EmbeddingModelUnavailable

QUESTIONS = [
    "怎么开通花呗",
    "花呗在哪里开通",
    "今天北京的天气怎么样",
    "How do I reset my password?",
    "借款500元要多少利息",
]


@pytest.fixture(scope="module")
def encoder() -> UseEncoder:
    return UseEncoder()


def test_vectors_are_unit_length_float32_in_the_order_of_the_texts(encoder):
    vectors = encoder.encode(QUESTIONS, batch_size=2, normalize_embeddings=True, convert_to_numpy=True)

    assert vectors.shape == (len(QUESTIONS), DIMENSION) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, DIMENSION)
    assert encoder.get_embedding_dimension() == DIMENSION
    with pytest.raises(TypeError):
        encoder.encode("one string is not a list of texts")


def test_a_text_gets_the_same_vector_every_time_and_whatever_is_beside_it(encoder):
    first, again = encoder.encode(QUESTIONS), encoder.encode(QUESTIONS)
    alone = np.vstack([encoder.encode([question]) for question in QUESTIONS])

    assert np.array_equal(first, again)
    assert np.min(np.sum(first * alone, axis=1)) > 0.99999


def test_a_chinese_paraphrase_is_closer_than_an_unrelated_chinese_question(encoder):
    question, paraphrase, unrelated = encoder.encode(QUESTIONS[:3])

    assert question @ paraphrase > question @ unrelated + 0.2


def test_concurrent_calls_from_threads_give_the_vectors_of_one_thread(encoder):
    texts = QUESTIONS * 8
    serial = encoder.encode(texts, batch_size=3)
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda text: encoder.encode([text])[0], texts))

    assert np.min(np.sum(np.vstack(threaded) * serial, axis=1)) > 0.99999


def test_the_encoder_runs_the_processs_blas_on_one_thread(encoder):
    from threadpoolctl import threadpool_info

    assert {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"} == {1}


def test_token_counts_are_the_models_own_and_grow_with_the_text():
    prefixes = [
        "怎",
        "怎么",
        "怎么开通花呗",
        "怎么开通花呗 and an English tail",
        "怎么开通花呗 and an English tail " * 20,
    ]
    counts = embedding_use.token_counts(prefixes)

    assert all(count > 0 for count in counts)
    assert counts == sorted(counts) and counts[-1] > 10 * counts[2]
    assert embedding_use.token_counts(["怎么开通花呗"]) == [len(embedding_use.token_ids("怎么开通花呗"))]
    assert embedding_use.token_counts([""]) == [1]  # read as one unknown token


def test_unknown_fraction_reads_chinese_whole_and_emoji_not_at_all():
    assert embedding_use.unknown_fraction("怎么开通花呗？我的额度是多少") == 0.0
    assert embedding_use.unknown_fraction("How do I reset my password?") == 0.0
    assert embedding_use.unknown_fraction("😀 😀") == 1.0
    assert embedding_use.unknown_fraction("") == 1.0
    assert embedding_use.unknown_fraction("花呗 😀") == pytest.approx(1 / 3)  # 花, 呗, 😀: the word marks left out


def test_nothing_of_a_long_text_is_cut(encoder):
    head = "怎么开通花呗？" * 300
    assert embedding_use.max_tokens() is None
    assert embedding_use.token_counts([head])[0] > 1000
    with_tail, other_tail = encoder.encode(
        [head + "另外我想问一下信用卡怎么还款", head + "the weather in Beijing today"]
    )

    assert with_tail @ other_tail < 0.9999


def test_the_identity_digests_the_packages_model_files():
    root = embedding_use.model_path()

    assert {path.name for path in root.iterdir()} >= {"sp.model", "weights.npz"}
    identity = embedding_use.model_identity()
    assert identity.startswith("use-multilingual-v3@") and identity == embedding_use.model_identity(root)


@pytest.fixture
def model_copy(tmp_path):
    root = tmp_path / "use"
    shutil.copytree(embedding_use.model_path(), root)
    return root


def test_an_empty_model_directory_is_unavailable(tmp_path):
    with pytest.raises(EmbeddingModelUnavailable, match="holds no"):
        UseEncoder(tmp_path)
    with pytest.raises(EmbeddingModelUnavailable, match="missing or holds no file"):
        embedding_use.model_identity(tmp_path)


def test_a_missing_weights_file_is_unavailable(model_copy):
    (model_copy / "weights.npz").unlink()

    with pytest.raises(EmbeddingModelUnavailable, match="holds no weights.npz"):
        UseEncoder(model_copy)


def test_a_truncated_weights_file_is_unavailable(model_copy):
    weights = model_copy / "weights.npz"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])

    with pytest.raises(EmbeddingModelUnavailable, match="weights.npz does not load"):
        UseEncoder(model_copy)


@pytest.mark.parametrize("content", [b"", b"\x00" * 64, bytes(range(256)) * 40, b"not a sentencepiece model\n"])
def test_a_broken_tokenizer_file_is_unavailable(model_copy, content):
    (model_copy / "sp.model").write_bytes(content)

    with pytest.raises(EmbeddingModelUnavailable, match="sp.model"):
        UseEncoder(model_copy)
