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
