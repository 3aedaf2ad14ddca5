"""Splitting text into chunks measured in the embedding model's own word pieces.

semantic-text-splitter (a maintained Rust splitter) fills each chunk with the largest semantic units that fit:
paragraphs, then sentences, then words; Markdown by its headings and blocks. Every chunk is at most
`chunk_token_limit` word pieces, so the model reads all of it (all-MiniLM-L6-v2 silently cuts at 256 pieces,
two of which are its special tokens).

Before splitting, a run the model would read as one [UNK] only because it is too long (WordPiece gives up on a word
of more than `max_input_chars_per_word` characters: a hex or base64 blob, a long URL token, kana or Hangul without
spaces) is broken by spaces into words it reads, so its content reaches the model and the counts are the pieces the
model really reads.
"""

from __future__ import annotations

import hashlib
import re
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


def long_runs_break(text: str) -> str:
    """`text` with a space put into every run the model's tokenizer would read as one unknown token only because it
    is longer than the tokenizer reads a word, so each piece is read instead. Every character is kept in order; text
    the model already reads is returned unchanged. A tokenizer without such a limit changes nothing."""
    tokenizer = embeddings.tokenizer()
    limit = getattr(tokenizer.model, "max_input_chars_per_word", None)
    unknown = getattr(tokenizer.model, "unk_token", None)
    if not limit or not unknown:
        return text
    normalizer = tokenizer.normalizer
    normalized_lengths: dict[str, int] = {}

    def normalized_length(char: str) -> int:
        # The limit counts characters after normalisation (Hangul decomposes into two or three jamo each).
        if char not in normalized_lengths:
            normalized_lengths[char] = len(normalizer.normalize_str(char)) if normalizer else 1
        return normalized_lengths[char]

    def word_length(word: str) -> int:
        return len(word) if word.isascii() else sum(map(normalized_length, word))

    def pieces(word: str) -> list[str]:
        if word.isascii():  # lower-casing ASCII keeps its length
            return [word[start : start + limit] for start in range(0, len(word), limit)]
        parts, start, size = [], 0, 0
        for index, char in enumerate(word):
            length = normalized_length(char)
            if size + length > limit and index > start:
                parts.append(word[start:index])
                start, size = index, 0
            size += length
        parts.append(word[start:])
        return parts

    def run_break(match: re.Match) -> str:
        run = match.group()
        encoding = tokenizer.encode(run, add_special_tokens=False)
        out, done = [], 0
        for token, (start, end) in zip(encoding.tokens, encoding.offsets, strict=True):
            word = run[start:end]
            if token != unknown or word_length(word) <= limit:
                continue
            out.extend((run[done:start], " ".join(pieces(word))))
            done = end
        out.append(run[done:])
        return "".join(out)

    # Only a run of more than limit / 3 characters can normalise to more than `limit`.
    return re.sub(rf"\S{{{limit // 3 + 1},}}", run_break, text)


@lru_cache(maxsize=16)
def _splitter(max_tokens: int, overlap: int, markdown: bool):  # noqa: ANN202
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    splitter_class = MarkdownSplitter if markdown else TextSplitter
    return splitter_class.from_huggingface_tokenizer(embeddings.tokenizer(), max_tokens, overlap=overlap)


def text_chunk(*, text: str, max_tokens: int, overlap_tokens: int, markdown: bool = False) -> list[ChunkDraft]:
    """Chunks of `text` in reading order, each at most `max_tokens` word pieces, neighbours sharing up to
    `overlap_tokens`."""
    overlap = chunk_overlap_limit(requested=overlap_tokens, max_tokens=max_tokens)
    text = long_runs_break(text)
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
    """A client's own chunks, kept as sent but for the spaces `long_runs_break` puts into runs the model would
    otherwise lose. A chunk the model could not read whole is refused rather than silently half-embedded."""
    texts = [long_runs_break(str(chunk["text"])) for chunk in chunks]
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
