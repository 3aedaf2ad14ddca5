import base64
import hashlib
import re

import pytest

from retrieval import embeddings
from retrieval.chunking import (
    ChunkTooLongError,
    chunk_overlap_limit,
    chunk_token_limit,
    prechunked_drafts,
    text_chunk,
    text_hash,
)

SENTENCES = [f"Sentence number {i} talks about protein folding and cell biology in some detail." for i in range(120)]


def test_limit_never_exceeds_what_the_model_reads():
    assert chunk_token_limit(requested=200, model_max_tokens=256) == 200
    assert chunk_token_limit(requested=256, model_max_tokens=256) == 254  # [CLS] and [SEP] take two
    assert chunk_token_limit(requested=256, model_max_tokens=128) == 126
    assert chunk_overlap_limit(requested=32, max_tokens=200) == 32
    assert chunk_overlap_limit(requested=128, max_tokens=100) == 50


def test_chunks_fit_the_token_budget_and_cover_the_text():
    text = "\n\n".join(" ".join(SENTENCES[i : i + 6]) for i in range(0, len(SENTENCES), 6))
    drafts = text_chunk(text=text, max_tokens=100, overlap_tokens=0)
    assert len(drafts) > 5
    assert all(0 < draft.token_count <= 100 for draft in drafts)
    assert [draft.position for draft in drafts] == list(range(len(drafts)))
    # The model's own tokenizer agrees with the stored counts, special tokens excluded.
    assert [draft.token_count for draft in drafts] == embeddings.token_counts([d.text for d in drafts])
    assert all(draft.content_hash == text_hash(draft.text) for draft in drafts)
    for sentence in SENTENCES:
        assert any(sentence in draft.text for draft in drafts)


def test_chunks_end_on_sentence_boundaries():
    drafts = text_chunk(text=" ".join(SENTENCES), max_tokens=60, overlap_tokens=0)
    assert all(draft.text.endswith(".") for draft in drafts)


def test_overlap_repeats_the_end_of_the_previous_chunk():
    drafts = text_chunk(text=" ".join(SENTENCES), max_tokens=80, overlap_tokens=30)
    plain = text_chunk(text=" ".join(SENTENCES), max_tokens=80, overlap_tokens=0)
    assert len(drafts) > len(plain)
    shared = [set(a.text.split(".")) & set(b.text.split(".")) - {""} for a, b in zip(drafts, drafts[1:], strict=False)]
    assert all(shared)


def test_one_giant_word_is_still_cut_to_the_limit():
    drafts = text_chunk(text="alpha," * 1000, max_tokens=50, overlap_tokens=0)
    assert len(drafts) > 1 and all(draft.token_count <= 50 for draft in drafts)


def test_chunking_is_deterministic():
    text = " ".join(SENTENCES)
    first = text_chunk(text=text, max_tokens=90, overlap_tokens=10)
    assert first == text_chunk(text=text, max_tokens=90, overlap_tokens=10)


def test_prechunked_are_kept_as_sent_with_their_ids():
    drafts = prechunked_drafts(chunks=[{"text": "alpha beta", "external_id": "a"}, {"text": "gamma"}], max_tokens=254)
    assert [(d.text, d.external_id, d.position) for d in drafts] == [("alpha beta", "a", 0), ("gamma", None, 1)]


def test_prechunked_chunk_longer_than_the_model_reads_is_refused():
    with pytest.raises(ChunkTooLongError, match=r"Chunk 1 \(long\) has \d+ word pieces; the embedding model reads at"):
        prechunked_drafts(chunks=[{"text": "ok"}, {"text": "word " * 400, "external_id": "long"}], max_tokens=254)


@pytest.mark.parametrize("text", ["\u200b\u200b\u200b", "\ufeff\u200d", "\x01\x02\x03\x7f", "\u00ad" * 40])
def test_text_the_model_reads_nothing_of_makes_no_chunk(text):
    # Not whitespace to Python, nothing to the tokenizer: such a chunk would be embedded as [CLS][SEP] alone.
    assert embeddings.token_count(text) == 0
    assert text_chunk(text=text, max_tokens=50, overlap_tokens=0) == []
    assert text_chunk(text=text, max_tokens=50, overlap_tokens=0, markdown=True) == []


def _blob(size: int) -> bytes:
    return b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(size // 32 + 1))[:size]


# Runs the model's WordPiece would read as one [UNK] each (it gives up on a word longer than 100 characters).
LONG_RUNS = {
    "hex blob": _blob(2500).hex(),
    "base64 blob": base64.b64encode(_blob(3750)).decode(),
    "URL token": "https://example.com/download?token=" + "a1B2c3D4" * 30,
    "katakana": "カタカナ" * 40,
    "hangul": "한국어텍스트처리" * 20,
}


def _model_reads(text: str) -> list[int]:
    """Word-piece ids the embedding model itself reads for `text` (its own tokenizer is the reference)."""
    return embeddings.embedding_model().tokenizer(text, add_special_tokens=False)["input_ids"]


def _visible(text: str) -> str:
    return re.sub(r"\s", "", text)


@pytest.mark.parametrize("name", LONG_RUNS)
def test_a_long_run_without_spaces_reaches_the_model_whole_and_is_counted_truly(name):
    text = f"Before the run comes a sentence. {LONG_RUNS[name]} After the run comes another one."
    drafts = text_chunk(text=text, max_tokens=60, overlap_tokens=0)
    unknown = embeddings.embedding_model().tokenizer.unk_token_id
    for draft in drafts:
        read = _model_reads(draft.text)
        assert unknown not in read, draft.text
        assert draft.token_count == len(read) <= 60
    # Nothing is lost or reordered: only spaces were put into the run.
    assert _visible("".join(draft.text for draft in drafts)) == _visible(text)


def test_a_client_chunk_with_a_long_run_reaches_the_model_whole():
    run = LONG_RUNS["hex blob"][:300]
    (draft,) = prechunked_drafts(chunks=[{"text": f"key: {run}", "external_id": "k"}], max_tokens=254)
    read = _model_reads(draft.text)
    assert embeddings.embedding_model().tokenizer.unk_token_id not in read
    assert draft.token_count == len(read) and _visible(draft.text) == _visible(f"key: {run}")


def test_runs_the_model_reads_already_are_left_as_they_are():
    text = "A normal sentence, https://example.com/a/b?c=d and 自然语言 stay exactly as written."
    assert [draft.text for draft in text_chunk(text=text, max_tokens=60, overlap_tokens=0)] == [text]
