"""The embedding model run by ONNX Runtime: its export, made here from the model's own files, and the encoder that
runs it. Only `retrieval.embeddings` (the one owner of the model) and `retrieval.cross_encoder`
(which exports the pair reader made from it the same way) import this module.

The export is the whole sentence-transformers pipeline of the model (transformer, pooling, normalisation: whatever
its modules.json lists), traced by PyTorch's TorchScript exporter (`dynamo=False`: the dynamo exporter needs
`onnxscript`, which this project does not ship), then rewritten with ONNX Runtime's transformer fusions in fp32
(`fuse`: attention, layer normalisation with its residual, GELU, each one kernel where the traced graph has many
operators; a graph they do not fit is kept as traced). An export is kept only if the encoder, tokenising with the
model's own tokenizer as sentence-transformers does (truncated to max_seq_length, padded to the batch's longest), gives
sentence-transformers' vectors to a cosine of at least EXPORT_MIN_COSINE on the probe texts; so a file that exists
is one that reproduces the model.

The file is made once per model identity and shared by every process: it is written to a temporary file in the
same directory and renamed into place, under an exclusive file lock, so a process never reads a half-written file
and processes starting together make it once. Only this export needs torch; running the file does not.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from onnxruntime import InferenceSession
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

# Part of the file's name: an export made another way (other inputs, another opset) is another file, never mistaken
# for this one.
EXPORT_FORMAT = "st1-opset17-fused"
EXPORT_OPSET = 17
EXPORT_MIN_COSINE = 0.9999
PROBE_TEXTS = (
    "How do I reset my password?",
    "Glaciers carve U-shaped valleys and leave moraines behind when they retreat. " * 30,  # past max_seq_length
    "short",
)


class OnnxFileUnavailable(Exception):
    """The ONNX file cannot be read or made; the message says which and why."""


class OnnxEncoder:
    """Encodes texts with an ONNX Runtime session of the model, as sentence-transformers' `encode` does: `encode`
    takes the same arguments, and `max_seq_length` and `get_embedding_dimension` mean the same."""

    def __init__(self, *, session: InferenceSession, tokenizer: Tokenizer, max_seq_length: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.input_names = [model_input.name for model_input in session.get_inputs()]

    def get_embedding_dimension(self) -> int:
        return int(self.session.get_outputs()[0].shape[-1])

    def features(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The session's inputs for `texts`: token ids, attention mask and token types, padded to the longest."""
        encodings = self.tokenizer.encode_batch(list(texts))
        columns = {
            "input_ids": [encoding.ids for encoding in encodings],
            "attention_mask": [encoding.attention_mask for encoding in encodings],
            "token_type_ids": [encoding.type_ids for encoding in encodings],
        }
        return {name: np.asarray(columns[name], dtype=np.int64) for name in self.input_names}

    def encode(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        normalize_embeddings: bool = False,
        **_ignored: object,  # sentence-transformers' other options (progress bar, output type) change nothing here
    ) -> np.ndarray:
        """Vectors of `texts` in their order, float32, L2-normalised when asked, encoded `batch_size` at a time."""
        texts = list(texts)
        size = max(1, batch_size or len(texts) or 1)
        parts = [
            self.session.run(None, self.features(texts[start : start + size]))[0]
            for start in range(0, len(texts), size)
        ]
        vectors = np.vstack(parts).astype(np.float32, copy=False) if parts else np.zeros((0, 0), np.float32)
        if normalize_embeddings and len(vectors):
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors


def onnx_file_path(*, directory: Path, identity: str) -> Path:
    """Where the export of the model of `identity` lives: one file per model identity and export format."""
    name, _, digest = identity.rpartition("@")
    return Path(directory) / f"{re.sub(r'[^A-Za-z0-9._-]', '_', name)[:100]}@{digest}.{EXPORT_FORMAT}.onnx"


def onnx_encoder(*, root: Path, path: Path, tokenizer: Tokenizer, max_seq_length: int) -> OnnxEncoder:
    """An encoder on the ONNX file at `path`, made from the model at `root` first if it is missing, and made again
    if it does not load (truncated, garbage, not this kind of export). Raises OnnxFileUnavailable when it can be
    neither read nor made."""
    try:
        return _encoder_of(path, tokenizer, max_seq_length)
    except OnnxFileUnavailable:
        pass
    with exclusive(path):
        try:  # another process may have made it while this one waited for the lock
            return _encoder_of(path, tokenizer, max_seq_length)
        except OnnxFileUnavailable as unreadable:
            reason = unreadable
            if path.exists():
                logger.warning("%s; making it again", unreadable)
        try:
            onnx_export(root=root, destination=path, tokenizer=tokenizer, max_seq_length=max_seq_length)
        except OnnxFileUnavailable as exc:
            raise OnnxFileUnavailable(f"{reason}, and it cannot be made: {exc}") from exc
        return _encoder_of(path, tokenizer, max_seq_length)


def onnx_export(*, root: Path, destination: Path, tokenizer: Tokenizer, max_seq_length: int) -> None:
    """Export the sentence-transformers model at `root` to `destination`, replacing it whole, once its encoder
    reproduces the model on the probe texts. Needs torch; the caller holds the file's lock."""
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        # Eager attention traces to plain MatMul/Softmax, which ONNX Runtime fuses into its own attention kernel.
        model = SentenceTransformer(str(root), device="cpu", model_kwargs={"attn_implementation": "eager"})
        model.eval()
    except (ImportError, OSError, ValueError) as exc:
        raise OnnxFileUnavailable(f"the model at {root} cannot be loaded for the export ({exc})") from exc
    sample = model.preprocess(["a probe", "a longer probe of the model's inputs"])
    names = [name for name, value in sample.items() if isinstance(value, torch.Tensor)]

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.model(dict(zip(names, tensors, strict=True)))["sentence_embedding"]

    def write(temporary: Path) -> None:
        axes = {name: {0: "batch", 1: "sequence"} for name in names}
        with torch.no_grad(), warnings.catch_warnings():
            # The tracer's warnings (shapes read as constants, the legacy exporter) are answered by the check below.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                SentenceEmbedding().eval(),
                tuple(sample[name] for name in names),
                str(temporary),
                dynamo=False,
                input_names=names,
                output_names=["sentence_embedding"],
                dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
                opset_version=EXPORT_OPSET,
            )
            expected = model.encode(list(PROBE_TEXTS), normalize_embeddings=True, convert_to_numpy=True)
        fuse(path=temporary, root=root)
        made = _encoder_of(temporary, tokenizer, max_seq_length)
        cosines = np.sum(made.encode(PROBE_TEXTS, normalize_embeddings=True) * expected, axis=1)
        if float(cosines.min()) < EXPORT_MIN_COSINE:
            raise OnnxFileUnavailable(
                f"the export does not reproduce the model (cosine {float(cosines.min()):.6f} to PyTorch's vectors, "
                f"below {EXPORT_MIN_COSINE})"
            )

    file_replace(destination, write)
    logger.info("Made the ONNX file %s from %s", destination, root)


def file_replace(destination: Path, write: Callable[[Path], None]) -> None:
    """Make `destination` whole or not at all: `write` fills a temporary file in the same directory (and checks it,
    raising OnnxFileUnavailable when it is not right), which is then synced, made readable to every user and renamed
    into place. Any other failure of `write` is the file not being made, said as OnnxFileUnavailable. The caller holds
    the file's lock (`exclusive`)."""
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp")
        os.close(handle)
    except OSError as exc:
        raise OnnxFileUnavailable(f"{destination.parent} cannot be written ({exc})") from exc
    temporary = Path(name)
    try:
        write(temporary)
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from web and worker processes of other users
        os.replace(temporary, destination)
    except OnnxFileUnavailable:
        raise
    except Exception as exc:  # the exporter's failures have no common type; each is this file not being made
        raise OnnxFileUnavailable(f"the export failed ({type(exc).__name__}: {exc})") from exc
    finally:
        temporary.unlink(missing_ok=True)


def fuse(*, path: Path, root: Path) -> None:
    """Rewrite the traced export at `path` with ONNX Runtime's fusions for BERT-like encoders, in fp32: fewer, larger
    kernels for the same arithmetic, so a question's run is shorter. The caller's check against PyTorch then holds
    the fused file to the same vectors. A graph the fusions do not fit (another architecture) is left as traced."""
    try:
        from onnxruntime.transformers import optimizer

        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
        fused = optimizer.optimize_model(
            str(path),
            model_type="bert",
            num_heads=int(config.get("num_attention_heads", 0)),
            hidden_size=int(config.get("hidden_size", 0)),
            opt_level=1,
        )
        fused.save_model_to_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the optimizer's failures share no type; the traced graph still serves
        logger.warning("ONNX Runtime's fusions do not apply to the export of %s, kept as traced: %s", root, exc)


def _encoder_of(path: Path, tokenizer: Tokenizer, max_seq_length: int) -> OnnxEncoder:
    session = session_open(path)
    outputs = session.get_outputs()
    if "input_ids" not in {model_input.name for model_input in session.get_inputs()} or len(outputs) != 1:
        raise OnnxFileUnavailable(f"{path} is not an export of a sentence-embedding model")
    return OnnxEncoder(session=session, tokenizer=tokenizer, max_seq_length=max_seq_length)


def session_open(path: Path) -> InferenceSession:
    """An ONNX Runtime session of the file at `path` on the CPU, all graph optimisations on, its threads sleeping
    between runs. Raises OnnxFileUnavailable when there is no file or it does not load."""
    import onnxruntime

    if not path.is_file():
        raise OnnxFileUnavailable(f"there is no {path}")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Threads that spin between runs hold cores that the processes beside this one (Milvus, the database, a web or
    # worker process) need; without spinning they sleep until the next batch.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ONNX Runtime's load errors (bad protobuf, bad graph) share no useful base class
        raise OnnxFileUnavailable(f"{path} does not load ({type(exc).__name__}: {str(exc)[:200]})") from exc
    return session


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `path`'s lock file, so one process at a time makes the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a")
    except OSError as exc:
        raise OnnxFileUnavailable(f"{path.parent} cannot be written ({exc})") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
