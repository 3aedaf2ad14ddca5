"""Embedding backends side by side, in one process: query latency, batch throughput and how close each backend's
vectors are to PyTorch's (sentence-transformers, the same-run baseline).

    .venv/bin/python bench/embedding_backends.py [--limit N] [--queries N] [--no-candidates] [--gap-ms MS]

- query embedding: p50 and p95 over real questions (MTRAG turns and SciFact claims), one at a time, the backends
  interleaved question by question so machine load falls on all alike; target: onnx p50 at least 3x faster than
  torch's with a cosine of at least 0.9999. With `--gap-ms`, each question waits that long before it is embedded, as
  one that reaches a web process some time after the last one does (caches, thread pools and the CPU gone idle);
  by default they come back to back. The same questions are then timed with torch and onnx each in a process of
  its own, as a deployment runs one of them: blocks of 20 questions, the processes taking turns (the order swapped
  every block, a pause between them), so load still falls on both alike while neither runtime's threads (PyTorch's
  OpenMP workers spin for a while after each call) take the cores from the other's run.
- batch throughput: SciFact abstracts through `embeddings.embed_texts` (long runs broken, batches of similar token
  lengths, EMBEDDING_BATCH_SIZE), in blocks of KB_INGEST_EMBED_BATCH texts, the backends interleaved block by block.
- vectors: min and mean cosine to torch's over the same abstracts, and dense retrieval of the SciFact claims over
  them (recall@10, nDCG@10, brute force), so a backend whose vectors move is judged by what it costs in retrieval.

Besides the offered backends (torch, onnx: the export with ONNX Runtime's fusions) it measures candidates that are
not offered, to show why (--no-candidates to skip them): onnx-traced (the export as PyTorch traces it, without the
fusions), onnx-int8 (`quantize_dynamic` of it as documented, every supported operator) and onnx-int8-pc (MatMul
weights only, per channel), whose files are made in a temporary directory; and onnx-spin, the onnx file run with
threads that spin within a run and stop when it ends.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
os.environ.setdefault("LOG_LEVEL", "WARNING")

QUERY_TARGET = 3.0
COSINE_TARGET = 0.9999


def _questions(limit: int) -> list[str]:
    """MTRAG users' questions, then SciFact claims, up to `limit`."""
    questions = []
    with (DATA / "mtrag" / "conversations.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            conversation = json.loads(line)
            questions += [turn["question"] for turn in conversation.get("turns", []) if turn.get("question")]
    questions += [query["text"] for query in _scifact_queries()]
    return questions[:limit]


def _scifact_queries() -> list[dict]:
    with (DATA / "scifact" / "queries.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _abstracts(limit: int | None) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with (DATA / "scifact" / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
            ids.append(str(row["_id"]))
            texts.append(f"{title}\n\n{text}" if title else text)
            if limit is not None and len(texts) >= limit:
                break
    return ids, texts


def _candidates(directory: Path, model_root: Path, tokenizer: object, length: int) -> dict[str, Path]:
    """Files of the backends tried and not offered: the export without ONNX Runtime's fusions, made as the onnx
    backend's file is (and checked against PyTorch alike), and its quantised copies."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from retrieval import embedding_onnx

    files = {"onnx-traced": directory / "traced.onnx"}
    fuse, embedding_onnx.fuse = embedding_onnx.fuse, lambda **_: None
    try:
        embedding_onnx.onnx_export(
            root=model_root, destination=files["onnx-traced"], tokenizer=tokenizer, max_seq_length=length
        )
    finally:
        embedding_onnx.fuse = fuse
    files["onnx-int8"], files["onnx-int8-pc"] = directory / "int8.onnx", directory / "int8-pc.onnx"
    quantize_dynamic(str(files["onnx-traced"]), str(files["onnx-int8"]), weight_type=QuantType.QInt8)
    quantize_dynamic(
        str(files["onnx-traced"]),
        str(files["onnx-int8-pc"]),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
    )
    return files


def _spinning_session(path: Path) -> object:
    """A session of `path` whose threads spin between the operators of a run (no wake-up per operator) and stop
    spinning when the run ends (`session.force_spinning_stop`), so they hold no core between questions."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@contextmanager
def _running(encoder: object) -> Iterator[None]:
    """Makes `encoder` the process's model for the block, as EMBEDDING_BACKEND would."""
    from retrieval import embeddings

    previous = dict(embeddings._models)
    embeddings._models[embeddings.primary_model()] = encoder
    try:
        yield
    finally:
        embeddings._models.clear()
        embeddings._models.update(previous)


def _run_floor(encoder: object, tokens: int, runs: int = 200) -> float:
    """p50 seconds of the onnx session's run alone (no tokeniser, no pooling in Python) on one input of `tokens`
    word pieces. At 1 token the matrix products have one row: what is left is reading every weight once (some 43 MB
    in fp32) and each operator's fixed cost, the floor of any question on this backend."""
    feed = {
        name: np.ones((1, tokens), dtype=np.int64) if name != "token_type_ids" else np.zeros((1, tokens), np.int64)
        for name in encoder.input_names
    }
    feed["input_ids"] = np.full((1, tokens), 2000, dtype=np.int64)
    for _ in range(10):
        encoder.session.run(None, feed)
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        encoder.session.run(None, feed)
        seconds.append(time.perf_counter() - started)
    return _percentile(seconds, 0.5)


def _backend_process(connection, backend: str) -> None:  # noqa: ANN001 - a multiprocessing connection
    """A process running one backend, as a deployment does: it embeds each list of questions it is sent, one at a time
    (after `gap` seconds each), and sends back their seconds and vectors; None ends it."""
    import django

    django.setup()
    from retrieval import embeddings

    root, identity = embeddings.model_path(), embeddings.model_identity()
    torch = backend == "torch"
    embeddings._model = embeddings._torch_model(root) if torch else embeddings._onnx_encoder(root, identity)
    while (message := connection.recv()) is not None:
        questions, gap = message
        seconds, vectors = [], []
        for question in questions:
            if gap:
                time.sleep(gap)
            started = time.perf_counter()
            vectors.append(embeddings.embed_query(question))
            seconds.append(time.perf_counter() - started)
        connection.send((seconds, np.vstack(vectors)))


def _apart(questions: list[str], *, gap: float, block: int = 20) -> dict[str, tuple[list[float], np.ndarray]]:
    """Per backend (torch, onnx), each in a process of its own: the seconds and vectors of `questions`, timed in
    blocks the two take in turns (the order swapped every block, 0.3 s between blocks so the other's threads idle)."""
    context = multiprocessing.get_context("spawn")
    workers = {}
    for backend in ("torch", "onnx"):
        ours, theirs = context.Pipe()
        process = context.Process(target=_backend_process, args=(theirs, backend), daemon=True)
        process.start()
        workers[backend] = (ours, process)
    try:
        for ours, _ in workers.values():  # first calls (allocations, thread pools) untimed
            ours.send((questions[:16], 0.0))
            ours.recv()
        seconds: dict[str, list[float]] = {backend: [] for backend in workers}
        vectors: dict[str, list[np.ndarray]] = {backend: [] for backend in workers}
        for number, start in enumerate(range(0, len(questions), block)):
            for backend in list(workers)[:: 1 if number % 2 == 0 else -1]:
                time.sleep(0.3)
                workers[backend][0].send((questions[start : start + block], gap))
                taken, made = workers[backend][0].recv()
                seconds[backend] += taken
                vectors[backend].append(made)
        return {backend: (seconds[backend], np.vstack(vectors[backend])) for backend in workers}
    finally:
        for ours, process in workers.values():
            ours.send(None)
            process.join(timeout=30)


def _percentile(values: list[float], share: float) -> float:
    return float(np.percentile(np.asarray(values), share * 100))


def _retrieval(
    vectors: np.ndarray, ids: list[str], query_vectors: np.ndarray, queries: list[dict]
) -> tuple[float, float]:
    """(recall@10, nDCG@10) of the SciFact claims whose relevant abstracts are among `ids`."""
    index = {doc_id: position for position, doc_id in enumerate(ids)}
    recalls, gains = [], []
    for query, query_vector in zip(queries, query_vectors, strict=True):
        relevant = {index[doc_id] for doc_id in map(str, query["relevant_doc_ids"]) if doc_id in index}
        if not relevant:
            continue
        top = np.argsort(-(vectors @ query_vector))[:10]
        recalls.append(len(relevant & set(top.tolist())) / len(relevant))
        dcg = sum(1 / math.log2(rank + 2) for rank, position in enumerate(top) if position in relevant)
        ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(relevant), 10)))
        gains.append(dcg / ideal)
    return float(np.mean(recalls)), float(np.mean(gains))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N SciFact abstracts (all: 5,183)")
    parser.add_argument("--queries", type=int, default=400, help="questions timed one at a time")
    parser.add_argument("--no-candidates", action="store_true", help="only the offered backends")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="idle time before each timed question")
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings

    from retrieval import embeddings
    from retrieval.embedding_onnx import OnnxEncoder, _encoder_of

    root, identity = embeddings.model_path(), embeddings.model_identity()
    encoders: dict[str, object] = {
        "torch": embeddings._torch_model(root),
        "onnx": embeddings._onnx_encoder(root, identity),
    }
    scratch = tempfile.TemporaryDirectory(prefix="embedding-backends-")
    if not args.no_candidates:
        tokenizer, length = embeddings._encoder_tokenizer(), embeddings.max_sequence_tokens()
        files = _candidates(Path(scratch.name), root, tokenizer, length)
        for name, path in files.items():
            encoders[name] = _encoder_of(path, tokenizer, length)
        spinning = _spinning_session(embeddings.onnx_file())
        encoders["onnx-spin"] = OnnxEncoder(session=spinning, tokenizer=tokenizer, max_seq_length=length)
    names = list(encoders)
    assert all(isinstance(encoders[name], OnnxEncoder) for name in names[1:])

    def embedded(name: str, call: Callable[[], np.ndarray]) -> tuple[np.ndarray, float]:
        with _running(encoders[name]):
            started = time.perf_counter()
            result = call()
            return result, time.perf_counter() - started

    questions = _questions(args.queries)
    for name in names:  # first calls (allocations, thread pools) untimed
        embedded(name, lambda: embeddings.embed_texts(questions[:16]))
    latencies: dict[str, list[float]] = {name: [] for name in names}
    question_vectors: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for number, question in enumerate(questions):
        for name in names[number % len(names) :] + names[: number % len(names)]:
            if args.gap_ms:
                time.sleep(args.gap_ms / 1000)
            vector, seconds = embedded(name, lambda question=question: embeddings.embed_query(question))
            latencies[name].append(seconds)
            question_vectors[name].append(vector)

    ids, texts = _abstracts(args.limit)
    block = settings.INGEST_EMBED_BATCH
    corpus: dict[str, list[np.ndarray]] = {name: [] for name in names}
    seconds_of = dict.fromkeys(names, 0.0)
    for number, start in enumerate(range(0, len(texts), block)):
        part = texts[start : start + block]
        for name in names[number % len(names) :] + names[: number % len(names)]:
            vectors, seconds = embedded(name, lambda part=part: embeddings.embed_texts(part))
            corpus[name].append(vectors)
            seconds_of[name] += seconds
        print(f"\r  abstracts {start + len(part)}/{len(texts)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    queries = _scifact_queries()
    baseline_corpus = np.vstack(corpus["torch"])
    baseline_questions = np.vstack(question_vectors["torch"])
    torch_p50 = _percentile(latencies["torch"], 0.5)
    torch_rate = len(texts) / seconds_of["torch"]
    print(
        f"model {identity}, {len(questions)} questions ({args.gap_ms:g} ms apart), {len(texts)} abstracts, "
        f"encoder batch {settings.EMBEDDING_BATCH_SIZE}, blocks of {block}; {os.cpu_count()} CPUs"
    )
    print(
        f"{'backend':15} {'p50 ms':>7} {'p95 ms':>7} {'p50 x':>6} {'chunks/s':>9} {'x':>6} "
        f"{'min cos':>9} {'mean cos':>9} {'q min cos':>9} {'R@10':>6} {'nDCG@10':>7}"
    )
    for name in names:
        vectors = np.vstack(corpus[name])
        cosines = np.sum(vectors * baseline_corpus, axis=1)
        question_cosines = np.sum(np.vstack(question_vectors[name]) * baseline_questions, axis=1)
        with _running(encoders[name]):
            claim_vectors = embeddings.embed_texts([query["text"] for query in queries])
        recall, ndcg = _retrieval(vectors, ids, claim_vectors, queries)
        p50, p95 = _percentile(latencies[name], 0.5), _percentile(latencies[name], 0.95)
        rate = len(texts) / seconds_of[name]
        print(
            f"{name:15} {p50 * 1000:7.2f} {p95 * 1000:7.2f} {torch_p50 / p50:6.2f} "
            f"{rate:9.1f} {rate / torch_rate:6.2f} "
            f"{cosines.min():9.6f} {cosines.mean():9.6f} {question_cosines.min():9.6f} {recall:6.3f} {ndcg:7.3f}"
        )
        if name == "onnx":
            onnx_verdict = (torch_p50 / p50, float(min(cosines.min(), question_cosines.min())))
    speedup, worst = onnx_verdict
    tokens = int(np.median([len(encoders["onnx"].features([question])["input_ids"][0]) for question in questions]))
    one, typical = _run_floor(encoders["onnx"], 1), _run_floor(encoders["onnx"], tokens)
    print(
        f"onnx session run alone: {one * 1000:.2f} ms at 1 word piece (every weight read once), "
        f"{typical * 1000:.2f} ms at the questions' median {tokens}; {QUERY_TARGET}x torch's p50 is "
        f"{torch_p50 / QUERY_TARGET * 1000:.2f} ms for the whole embedding"
    )
    met = speedup >= QUERY_TARGET and worst >= COSINE_TARGET
    print(
        f"onnx query p50 {speedup:.2f}x torch's in one process, interleaved, lowest cosine {worst:.7f} "
        f"(target >= {QUERY_TARGET}x at >= {COSINE_TARGET}: {'met' if met else 'NOT met'})"
    )
    apart = _apart(questions, gap=args.gap_ms / 1000)
    torch_apart, onnx_apart = (_percentile(apart[backend][0], 0.5) for backend in ("torch", "onnx"))
    apart_cosine = float(np.sum(apart["onnx"][1] * apart["torch"][1], axis=1).min())
    apart_met = torch_apart / onnx_apart >= QUERY_TARGET and min(apart_cosine, worst) >= COSINE_TARGET
    print(
        f"each in a process of its own, blocks of 20 taking turns: torch p50 {torch_apart * 1000:.2f} ms, onnx "
        f"{onnx_apart * 1000:.2f} ms: {torch_apart / onnx_apart:.2f}x, lowest question cosine {apart_cosine:.7f} "
        f"(target >= {QUERY_TARGET}x at >= {COSINE_TARGET}: {'met' if apart_met else 'NOT met'})"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    scratch.cleanup()


if __name__ == "__main__":
    main()
