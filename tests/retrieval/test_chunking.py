import base64
import hashlib
import re
from functools import lru_cache

import numpy as np
import pytest

from retrieval import chunking, embeddings
from retrieval.chunking import (
    ChunkTooLongError,
    ChunkWithoutTextError,
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
    with pytest.raises(ChunkTooLongError, match=r"Chunk 1 \(long\) has 400 word pieces of the embedding model"):
        prechunked_drafts(chunks=[{"text": "ok"}, {"text": "word " * 400, "external_id": "long"}], max_tokens=254)


def test_an_oversize_chunk_is_refused_naming_the_knowledge_bases_chunk_size_and_the_models_limit():
    """The limit told is the one that refused it (the knowledge base's chunk size), in its unit, beside the model's."""
    with pytest.raises(ChunkTooLongError) as refused:
        prechunked_drafts(chunks=[{"text": "word " * 262, "external_id": "abc"}], max_tokens=200, model_max_tokens=256)
    message = str(refused.value)
    assert "Chunk 0 (abc) has 262 word pieces" in message
    assert "chunks are at most 200 word pieces (its chunk_max_tokens" in message
    assert "own limit of 256 word pieces" in message
    assert "split_oversize_chunks" in message


def test_an_oversize_chunk_is_split_at_sentences_keeping_its_external_id_with_a_suffix():
    long_text = " ".join(SENTENCES[:30])
    drafts = prechunked_drafts(
        chunks=[{"text": "first", "external_id": "a"}, {"text": long_text, "external_id": "abc"}, {"text": "last"}],
        max_tokens=60,
        split_oversize=True,
    )
    pieces = drafts[1:-1]
    assert len(pieces) > 2
    assert [d.external_id for d in pieces] == [f"abc#{n}" for n in range(1, len(pieces) + 1)]
    assert [d.position for d in drafts] == list(range(len(drafts)))
    assert (drafts[0].external_id, drafts[-1].text) == ("a", "last")
    assert all(d.token_count <= 60 for d in pieces)
    assert all(d.text.endswith(".") for d in pieces)  # cut between sentences, not inside one
    assert " ".join(d.text for d in pieces) == long_text


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


@lru_cache(maxsize=1)
def _model_tokenizer():
    """The tokenizer sentence-transformers gives the model (transformers' own loading of its files): the reference,
    whichever backend runs the model."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(embeddings.model_path()))


def _model_reads(text: str) -> list[int]:
    """Word-piece ids the embedding model itself reads for `text` (its own tokenizer is the reference)."""
    return _model_tokenizer()(text, add_special_tokens=False)["input_ids"]


def _visible(text: str) -> str:
    return re.sub(r"\s", "", text)


def _exact_slices(text: str, pieces: list[str]) -> bool:
    """Whether `pieces` are, in order, each an exact slice of `text`, none starting before the previous one."""
    cursor = 0
    for piece in pieces:
        found = text.find(piece, cursor)
        if found < 0:
            return False
        cursor = found
    return True


@pytest.mark.parametrize("max_tokens", [16, 60, 200])
@pytest.mark.parametrize("name", LONG_RUNS)
def test_a_long_run_is_stored_as_written_and_reaches_the_model_whole_and_counted_truly(name, max_tokens):
    text = f"Before the run comes a sentence. {LONG_RUNS[name]} After the run comes another one."
    drafts = text_chunk(text=text, max_tokens=max_tokens, overlap_tokens=0)
    unknown = _model_tokenizer().unk_token_id
    for draft in drafts:
        read = _model_reads(embeddings.long_runs_break(draft.text))
        assert unknown not in read, draft.text
        assert draft.token_count == len(read) <= max_tokens
        assert draft.content_hash == text_hash(draft.text)
    # Stored as written: every chunk is a slice of the text, no space added; together they hold all of it.
    assert _exact_slices(text, [draft.text for draft in drafts])
    assert _visible("".join(draft.text for draft in drafts)) == _visible(text)


def test_a_slice_the_model_reads_as_longer_than_the_splitter_measured_is_split_again(monkeypatch):
    # A cut inside a broken word can leave a slice whose run the model breaks afresh (and counts otherwise) than
    # the splitter measured it. Forced here: the first split hands back two halves far over the limit.
    text = f"Before the run. {LONG_RUNS['hex blob'][:800]} Middle words. {LONG_RUNS['hangul']} After the run."
    real = chunking._splitter(40, 0, False)

    class MismeasuringSplitter:
        calls = 0

        def chunk_indices(self, model_input: str) -> list[tuple[int, str]]:
            type(self).calls += 1
            if type(self).calls > 1:
                return real.chunk_indices(model_input)
            middle = model_input.index(" ", len(model_input) // 2)
            return [(0, model_input[:middle]), (middle + 1, model_input[middle + 1 :])]

    monkeypatch.setattr(chunking, "_splitter", lambda *args: MismeasuringSplitter())
    drafts = text_chunk(text=text, max_tokens=40, overlap_tokens=0)
    assert MismeasuringSplitter.calls == 3
    assert len(drafts) > 2 and all(0 < draft.token_count <= 40 for draft in drafts)
    assert _exact_slices(text, [draft.text for draft in drafts])
    assert _visible("".join(draft.text for draft in drafts)) == _visible(text)


def test_overlapping_chunks_of_long_runs_are_slices_of_the_text_too():
    text = " ".join(
        f"Entry {i}: {LONG_RUNS['hangul']} and {LONG_RUNS['hex blob'][i * 300 : i * 300 + 250]}." for i in range(4)
    )
    drafts = text_chunk(text=text, max_tokens=80, overlap_tokens=30)
    assert len(drafts) > 4
    assert all(draft.text in text for draft in drafts)
    assert all(draft.token_count == embeddings.token_count(draft.text) <= 80 for draft in drafts)


def test_a_client_chunk_is_stored_as_sent_and_its_long_run_reaches_the_model_whole():
    sent = f"  key: {LONG_RUNS['hex blob'][:150]}\t{LONG_RUNS['hangul'][:40]}  \n"
    (draft,) = prechunked_drafts(chunks=[{"text": sent, "external_id": "k"}], max_tokens=254)
    assert draft.text == sent and draft.content_hash == text_hash(sent)
    read = _model_reads(embeddings.long_runs_break(sent))
    assert _model_tokenizer().unk_token_id not in read
    assert draft.token_count == len(read)


def test_a_client_chunk_whose_broken_form_is_too_long_is_refused():
    # 240 characters of Hangul are under the limit counted as written, over it as the model reads them.
    sent = LONG_RUNS["hangul"][:240]
    assert len(embeddings.tokenizer().encode(sent, add_special_tokens=False).ids) <= 16
    with pytest.raises(ChunkTooLongError, match="Chunk 0"):
        prechunked_drafts(chunks=[{"text": sent}], max_tokens=16)


@pytest.mark.parametrize("name", LONG_RUNS)
def test_the_model_reads_a_long_run_broken_wherever_the_text_comes_from(name):
    run = LONG_RUNS[name]
    broken = embeddings.long_runs_break(run)
    assert broken != run and _visible(broken) == _visible(run)
    assert embeddings.long_runs_break(broken) == broken  # breaking twice changes nothing more
    assert _model_tokenizer().unk_token_id not in _model_reads(broken)
    # Counts and vectors are of what the model reads, whether it is given the text as written or already broken.
    assert embeddings.token_count(run) == embeddings.token_count(broken) == len(_model_reads(broken))
    assert embeddings.token_counts([run, broken]) == [len(_model_reads(broken))] * 2
    as_written, as_read = embeddings.embed_texts([run, broken])
    np.testing.assert_allclose(as_written, as_read, atol=1e-5)
    np.testing.assert_allclose(embeddings.embed_query(run), as_read, atol=1e-5)


def test_text_without_long_runs_is_given_to_the_model_as_it_is():
    question = "How do I rotate the API key of https://example.com/account/settings?tab=keys before it expires?"
    assert embeddings.long_runs_break(question) is question
    assert embeddings.long_run_breaks(question) == []


def test_runs_the_model_reads_already_are_left_as_they_are():
    text = "A normal sentence, https://example.com/a/b?c=d and 自然语言 stay exactly as written."
    assert [draft.text for draft in text_chunk(text=text, max_tokens=60, overlap_tokens=0)] == [text]


@pytest.mark.parametrize("text", ["\u200b\u200b", "\ufeff", "\x01\x02", "\u00ad \u200d"])
def test_a_client_chunk_the_model_reads_nothing_of_is_refused_naming_it(text):
    """Such a chunk passed the API's "needs some text" check (none of it is whitespace to Python) and was embedded as
    [CLS][SEP] alone: a vector near every query, shown as an empty source."""
    with pytest.raises(ChunkWithoutTextError, match=r"Chunk 1 \(blank\) has no text the embedding model reads"):
        prechunked_drafts(chunks=[{"text": "ok"}, {"text": text, "external_id": "blank"}], max_tokens=254)


# Texts where a word's pieces are easy to get wrong: accents and combining marks (normalised away), CJK (each
# character its own word), emoji and ligatures (one word with their neighbours), invisible and control characters
# inside words (dropped by the tokenizer), punctuation runs, Markdown, a word too long to read, and long runs.
SLICING_TEXTS = [
    "Les élèves réfléchissent à l'œuvre de Molière, naïvement. " * 12,
    "日本語のテキスト、漢字と仮名。中文也在这里。" * 15,
    "emoji😀test 👍🏽 ok, ﬁne ligatures Ⅻ ①②③. " * 20,
    "ab\u200bcd soft\u00adhyphen zero\u200dwidth e\u0301\u0302 marks \t\r\n mixed\x01control\x7fchars. " * 15,
    "a.b,c;d-e(f)g" * 120,
    "# Title\n\nSome *emphasis* and a [link](https://example.com/a_b).\n\n- item one\n- item two\n\n" * 12,
    "x" * 150 + " " + "y" * 99 + " end. " * 40,
    " ".join(SENTENCES[:40]),
    f"Before. {LONG_RUNS['hex blob'][:900]} Middle. {LONG_RUNS['hangul']} After.",
]


def _tokenizer_measured_drafts(text: str, max_tokens: int, overlap: int, markdown: bool) -> list[chunking.ChunkDraft]:
    """text_chunk as it is with the splitter measuring every slice by tokenising it (no slice counter)."""
    real = embeddings.slice_token_counter
    try:
        embeddings.slice_token_counter = lambda text, model=None: None
        return text_chunk(text=text, max_tokens=max_tokens, overlap_tokens=overlap, markdown=markdown)
    finally:
        embeddings.slice_token_counter = real


@pytest.mark.parametrize("markdown", [False, True])
@pytest.mark.parametrize(("max_tokens", "overlap"), [(200, 32), (40, 12), (16, 0)])
@pytest.mark.parametrize("text", SLICING_TEXTS)
def test_chunks_are_the_ones_the_tokenizer_measured_splitter_makes(text, max_tokens, overlap, markdown):
    """The slice counter measures the splitter's candidates from one tokenisation of the text; the chunks, counts
    and hashes are the ones measuring each candidate by tokenising it gives."""
    drafts = text_chunk(text=text, max_tokens=max_tokens, overlap_tokens=overlap, markdown=markdown)
    assert drafts == _tokenizer_measured_drafts(text, max_tokens, overlap, markdown)
    assert [draft.token_count for draft in drafts] == embeddings.token_counts([draft.text for draft in drafts])


@pytest.mark.parametrize("text", SLICING_TEXTS)
def test_a_slice_counter_counts_every_slice_as_the_tokenizer_does(text):
    model_input = embeddings.long_runs_break(text)
    counter = embeddings.slice_token_counter(model_input)
    step = max(1, len(model_input) // 97)
    for start in range(0, len(model_input), step):
        for end in range(start + 1, min(len(model_input), start + 400) + 1, 7):
            piece = model_input[start:end]
            assert counter(piece) == len(embeddings.tokenizer().encode(piece, add_special_tokens=False).ids), piece
            counted = counter.count(start=start, end=end)
            assert counted in (None, counter(piece))


def test_a_slice_that_cuts_a_word_is_tokenised_on_its_own():
    counter = embeddings.slice_token_counter("unbelievably playing")
    assert counter.count(start=0, end=6) is None  # "unbeli|evably": its pieces are not the whole's
    assert counter("unbeli") == len(embeddings.tokenizer().encode("unbeli", add_special_tokens=False).ids)
    assert counter.count(start=0, end=12) == counter("unbelievably") >= 2
    assert counter("not in the text") == 4


def test_a_tokenizer_whose_pieces_depend_on_their_context_gets_no_slice_counter(monkeypatch):
    from tokenizers import Tokenizer, models, pre_tokenizers

    byte_level = Tokenizer(models.BPE())
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel()
    monkeypatch.setattr(embeddings, "tokenizer", lambda model=None: byte_level)
    assert embeddings.slice_token_counter("any text") is None
