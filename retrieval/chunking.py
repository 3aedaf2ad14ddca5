"""Splitting text into chunks measured in the embedding model's own word pieces.

semantic-text-splitter (a maintained Rust splitter) fills each chunk with the largest semantic units that fit:
paragraphs, then sentences, then words; Markdown by its headings and blocks. Every chunk is at most
`chunk_token_limit` word pieces, so the model reads all of it (all-MiniLM-L6-v2 silently cuts at 256 pieces,
two of which are its special tokens).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from retrieval import embeddings

SPECIAL_TOKENS = 2  # [CLS] and [SEP] count against the model's maximum sequence length


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before it is stored: what the pipeline compares with the rows already there."""

    position: int
    text: str
    token_count: int
    content_hash: str
    external_id: str | None = None


class ChunkTooLongError(ValueError):
    pass


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_token_limit(*, requested: int, model_max_tokens: int) -> int:
    """The chunk size actually used: what the knowledge base asks for, never more than the model reads."""
    return max(1, min(int(requested), int(model_max_tokens) - SPECIAL_TOKENS))


def chunk_overlap_limit(*, requested: int, max_tokens: int) -> int:
    """Overlap must stay below the chunk size or the splitter could not advance; half the chunk at most."""
    return max(0, min(int(requested), max_tokens // 2))


@lru_cache(maxsize=16)
def _splitter(max_tokens: int, overlap: int, markdown: bool):  # noqa: ANN202
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    splitter_class = MarkdownSplitter if markdown else TextSplitter
    return splitter_class.from_huggingface_tokenizer(embeddings.tokenizer(), max_tokens, overlap=overlap)


def text_chunk(*, text: str, max_tokens: int, overlap_tokens: int, markdown: bool = False) -> list[ChunkDraft]:
    """Chunks of `text` in reading order, each at most `max_tokens` word pieces, neighbours sharing up to
    `overlap_tokens`."""
    overlap = chunk_overlap_limit(requested=overlap_tokens, max_tokens=max_tokens)
    pieces = [piece for piece in _splitter(max_tokens, overlap, markdown).chunks(text) if piece.strip()]
    counts = embeddings.token_counts(pieces)
    # A piece of nothing but characters the tokenizer drops (zero-width, control, soft hyphens) is no chunk: the
    # model would embed [CLS][SEP] alone. A document of nothing else then has no text, as it should.
    readable = [(piece, count) for piece, count in zip(pieces, counts, strict=True) if count > 0]
    return [
        ChunkDraft(position=position, text=piece, token_count=count, content_hash=text_hash(piece))
        for position, (piece, count) in enumerate(readable)
    ]


def prechunked_drafts(*, chunks: list[dict], max_tokens: int) -> list[ChunkDraft]:
    """A client's own chunks, kept as sent. A chunk the model could not read whole is refused rather than
    silently half-embedded."""
    texts = [str(chunk["text"]) for chunk in chunks]
    counts = embeddings.token_counts(texts)
    drafts = []
    for position, (chunk, piece, count) in enumerate(zip(chunks, texts, counts, strict=True)):
        if count > max_tokens:
            raise ChunkTooLongError(
                f"Chunk {position} ({chunk.get('external_id') or 'no external_id'}) has {count} word pieces; "
                f"the embedding model reads at most {max_tokens}. Split it and send the document again."
            )
        drafts.append(
            ChunkDraft(
                position=position,
                text=piece,
                token_count=count,
                content_hash=text_hash(piece),
                external_id=chunk.get("external_id") or None,
            )
        )
    return drafts
