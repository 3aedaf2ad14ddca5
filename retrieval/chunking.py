"""Splitting text into chunks measured in the embedding model's own word pieces.

semantic-text-splitter (a maintained Rust splitter) fills each chunk with the largest semantic units that fit:
paragraphs, then sentences, then words; Markdown by its headings and blocks. Every chunk is at most
`chunk_token_limit` word pieces, so the model reads all of it (all-MiniLM-L6-v2 silently cuts at 256 pieces,
two of which are its special tokens).

A chunk's text is exactly what the document has there: a slice of the parsed text, or a client's chunk as sent. The
model reads it through `embeddings.model_input`: a WordPiece model with full-width letters and digits as ASCII ("ＡＰＩ"
as "API") and spaces put into a run it would otherwise read as one [UNK] (a hex or base64 blob, a long URL token, kana
or Hangul without spaces), the multilingual model with Chinese in Simplified characters. Counts and limits are of that
form, what the model really reads. So the splitter measures the folded and broken text, and each of its pieces is stored
as the span of the original text it came from (the fold is one character for one and the break only inserts spaces, so
the offsets map back exactly); the multilingual model's pieces are counted as it reads each. `content_hash` hashes the
stored text, so a re-index notices any change in what is shown; `model_input_hash` names what the model reads when that
differs, for the embedding cache.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from retrieval import embeddings

if TYPE_CHECKING:
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

SPECIAL_TOKENS = 2  # [CLS] and [SEP] count against the model's maximum sequence length


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before it is stored: what the pipeline compares with the rows already there."""

    position: int
    text: str
    token_count: int
    content_hash: str
    external_id: str | None = None
    # The hash of what the model reads of `text` when that differs from `text` (a long run broken, Traditional
    # characters read as Simplified); blank when the model reads the text as it is. The embedding cache keys vectors
    # by what the model reads; its purge matches this.
    model_input_hash: str = ""


class ChunkRefusedError(ValueError):
    """A client's chunk that cannot be indexed as sent; the message names it and says what to do."""


class ChunkTooLongError(ChunkRefusedError):
    pass


class ChunkWithoutTextError(ChunkRefusedError):
    pass


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_input_hash(text: str, model: str | None = None) -> str:
    """The hash of what the model reads of `text` (`embeddings.model_input`), or "" when that is `text` itself."""
    model_input = embeddings.model_input(text, model)
    return "" if model_input == text else text_hash(model_input)


def chunk_token_limit(*, requested: int, model_max_tokens: int) -> int:
    """The chunk size actually used: what the knowledge base asks for, never more than the model reads."""
    return max(1, min(int(requested), int(model_max_tokens) - SPECIAL_TOKENS))


def chunk_overlap_limit(*, requested: int, max_tokens: int) -> int:
    """Overlap must stay below the chunk size or the splitter could not advance; half the chunk at most."""
    return max(0, min(int(requested), max_tokens // 2))


def _splitter(
    max_tokens: int,
    overlap: int,
    markdown: bool,
    sizer: embeddings.SliceTokenCounter | None = None,
    model: str | None = None,
) -> TextSplitter | MarkdownSplitter:
    """The splitter of one text: measuring with `sizer` (its slice counter) when there is one, else with the model's
    tokenizer, which gives the same counts by tokenising every slice the splitter tries."""
    if sizer is None:
        return _tokenizer_splitter(max_tokens, overlap, markdown, embeddings.model_resolve(model))
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    splitter_class = MarkdownSplitter if markdown else TextSplitter
    return splitter_class.from_callback(sizer, max_tokens, overlap=overlap)


@lru_cache(maxsize=16)
def _tokenizer_splitter(max_tokens: int, overlap: int, markdown: bool, model: str) -> TextSplitter | MarkdownSplitter:
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    splitter_class = MarkdownSplitter if markdown else TextSplitter
    if embeddings.is_multilingual(model):
        # No Hugging Face tokenizer: the splitter measures each slice it tries with the model's own token count.
        return splitter_class.from_callback(
            lambda piece: embeddings.token_count(piece, model), max_tokens, overlap=overlap
        )
    return splitter_class.from_huggingface_tokenizer(embeddings.tokenizer(model), max_tokens, overlap=overlap)


@dataclass(frozen=True)
class _Piece:
    """A slice of the text and the word pieces the model reads of it; `read_as_is` when the model reads the slice as
    it is written (no long run to break, no Traditional character to read as Simplified)."""

    text: str
    token_count: int
    read_as_is: bool


def _pieces_as_read(
    text: str, *, max_tokens: int, overlap: int, markdown: bool, model: str | None = None
) -> list[_Piece]:
    """Slices of `text`, in order, that the splitter makes of it as the model reads it (long runs broken), with what
    the model reads of each.

    The splitter measures many candidate slices per chunk; they are counted from one tokenisation of the text
    (`embeddings.slice_token_counter`), which gives the tokenizer's own counts, so the chunks are the ones the
    tokenizer-measured splitter makes."""
    # The characters the model reads, one for one (full-width letters and digits as ASCII for a WordPiece model):
    # the splitter measures them, and a piece is cut from `text` at the same offsets.
    read = embeddings.characters_read(text, model)
    breaks = embeddings.long_run_breaks(read, model)
    bounds = [0, *breaks, len(text)]
    model_input = " ".join(read[start:end] for start, end in zip(bounds, bounds[1:], strict=False))
    counter = embeddings.slice_token_counter(model_input, model)
    # Where each inserted space sits in `model_input`; a piece's offsets there, less the spaces before them, are its
    # offsets in `text`. The splitter trims, so a piece never starts or ends on an inserted space.
    spaces = [offset + index for index, offset in enumerate(breaks)]
    spans = []
    for start, piece in _splitter(max_tokens, overlap, markdown, counter, model).chunk_indices(model_input):
        if piece.strip():
            spans.append((start, start + len(piece)))
    pieces = [text[start - bisect_left(spaces, start) : end - bisect_left(spaces, end)] for start, end in spans]
    if breaks or counter is None:
        # A slice of a text with long runs is read with its own runs broken, not always where the whole was broken.
        counts: list[int | None] = list(embeddings.token_counts(pieces, model))
    else:
        # A slice of a text without long runs has none either: the model reads it as written, as the counter counted.
        counts = [counter.count(start=start, end=end) for start, end in spans]
        uncounted = [index for index, count in enumerate(counts) if count is None]
        recounted = embeddings.token_counts([pieces[i] for i in uncounted], model)
        for index, count in zip(uncounted, recounted, strict=True):
            counts[index] = count
    if embeddings.is_multilingual(model) or read != text:
        return [
            _Piece(text=piece, token_count=count, read_as_is=embeddings.model_input(piece, model) == piece)
            for piece, count in zip(pieces, counts, strict=True)
        ]
    read_as_is = not breaks
    return [
        _Piece(text=piece, token_count=count, read_as_is=read_as_is)
        for piece, count in zip(pieces, counts, strict=True)
    ]


def _pieces_that_fit(
    text: str, *, max_tokens: int, overlap: int, markdown: bool, model: str | None = None
) -> list[_Piece]:
    """The pieces of `text`, each at most `max_tokens` word pieces as the model reads it."""
    pieces = _pieces_as_read(text, max_tokens=max_tokens, overlap=overlap, markdown=markdown, model=model)
    fitted = []
    for piece in pieces:
        if piece.token_count > max_tokens and len(pieces) > 1:
            # A cut inside a broken word leaves a slice whose run the model breaks afresh, elsewhere than the
            # splitter measured; split that slice again as the model reads it. Each round is shorter, so it ends.
            fitted.extend(
                _pieces_that_fit(piece.text, max_tokens=max_tokens, overlap=overlap, markdown=markdown, model=model)
            )
        else:
            fitted.append(piece)
    return fitted


def text_chunk(
    *, text: str, max_tokens: int, overlap_tokens: int, markdown: bool = False, model: str | None = None
) -> list[ChunkDraft]:
    """Chunks of `text` in reading order, each an exact slice of it that `model` reads (long runs broken) as at
    most `max_tokens` tokens, neighbours sharing up to `overlap_tokens`."""
    overlap = chunk_overlap_limit(requested=overlap_tokens, max_tokens=max_tokens)
    pieces = _pieces_that_fit(text, max_tokens=max_tokens, overlap=overlap, markdown=markdown, model=model)
    # A piece of nothing but characters the tokenizer drops (zero-width, control, soft hyphens) is no chunk: the
    # model would embed [CLS][SEP] alone. A document of nothing else then has no text, as it should.
    readable = [piece for piece in pieces if piece.token_count > 0]
    return [
        ChunkDraft(
            position=position,
            text=piece.text,
            token_count=piece.token_count,
            content_hash=text_hash(piece.text),
            model_input_hash="" if piece.read_as_is else model_input_hash(piece.text, model),
        )
        for position, piece in enumerate(readable)
    ]


def chunk_too_long_message(
    *, position: int, external_id: str | None, count: int, max_tokens: int, model_max_tokens: int
) -> str:
    """What a client is told of a chunk longer than the knowledge base's chunks may be: the real limit and its unit
    (the knowledge base's chunk size, in the embedding model's word pieces), the model's own limit, and the two ways
    out."""
    return (
        f"Chunk {position} ({external_id or 'no external_id'}) has {count} word pieces of the embedding model; this "
        f"knowledge base's chunks are at most {max_tokens} word pieces (its chunk_max_tokens, which the model's own "
        f"limit of {model_max_tokens} word pieces, {SPECIAL_TOKENS} of them its markers, caps). Split the chunk, or "
        'send the document with "split_oversize_chunks": true to have it split at sentence boundaries into chunks '
        'whose external ids end in "#1", "#2", ...'
    )


SPLIT_SUFFIX = "#"


def prechunked_drafts(
    *,
    chunks: list[dict],
    max_tokens: int,
    model_max_tokens: int = 256,
    split_oversize: bool = False,
    model: str | None = None,
) -> list[ChunkDraft]:
    """A client's own chunks, stored exactly as sent. A chunk the model could not read whole (counted as the model
    reads it, long runs broken) is refused rather than silently half-embedded, and so is one the model reads nothing of
    (zero-width, control or soft-hyphen characters only): its vector would be [CLS][SEP] alone, near every query.

    With `split_oversize`, a chunk longer than `max_tokens` is split instead (`text_chunk`: paragraphs, then
    sentences, no overlap) into pieces that are exact slices of it, each keeping the chunk's external id with
    "#1", "#2", ... appended, so a search hit on a piece still names the client's chunk."""
    texts = [str(chunk["text"]) for chunk in chunks]
    counts = embeddings.token_counts(texts, model)
    drafts: list[ChunkDraft] = []
    for index, (chunk, text, count) in enumerate(zip(chunks, texts, counts, strict=True)):
        external_id = chunk.get("external_id") or None
        if count == 0:
            raise ChunkWithoutTextError(
                f"Chunk {index} ({external_id or 'no external_id'}) has no text the embedding model "
                "reads (only invisible, control or formatting characters). Remove it or give it text, and send the "
                "document again."
            )
        if count > max_tokens and not split_oversize:
            raise ChunkTooLongError(
                chunk_too_long_message(
                    position=index,
                    external_id=external_id,
                    count=count,
                    max_tokens=max_tokens,
                    model_max_tokens=model_max_tokens,
                )
            )
        if count > max_tokens:
            pieces = text_chunk(text=text, max_tokens=max_tokens, overlap_tokens=0, model=model)
            longest = 255 - len(f"{SPLIT_SUFFIX}{len(pieces)}")
            if external_id is not None and len(external_id) > longest:
                raise ChunkTooLongError(
                    f"Chunk {index} ({external_id[:40]}...) is split into {len(pieces)} pieces, whose external ids "
                    f"are its own with {SPLIT_SUFFIX}1 to {SPLIT_SUFFIX}{len(pieces)} appended: shorten its "
                    f"external_id to at most {longest} characters, and send the document again."
                )
            for number, piece in enumerate(pieces, start=1):
                drafts.append(
                    ChunkDraft(
                        position=len(drafts),
                        text=piece.text,
                        token_count=piece.token_count,
                        content_hash=piece.content_hash,
                        external_id=None if external_id is None else f"{external_id}{SPLIT_SUFFIX}{number}",
                        model_input_hash=piece.model_input_hash,
                    )
                )
            continue
        drafts.append(
            ChunkDraft(
                position=len(drafts),
                text=text,
                token_count=count,
                content_hash=text_hash(text),
                external_id=external_id,
                model_input_hash=model_input_hash(text, model),
            )
        )
    return drafts
