"""What the bundled head's pair reader costs a turn, beside the cost the turn already has: the embedding of the
question (`embed_query` on the bundled model), the same process, the same run.

    .venv/bin/python bench/pair_reader_cost.py [--pairs N]

- latency: the reader's score of one pair (both orders in one run, as the decision asks it:
  `pair_reader.reader_score`) and one question's embedding, taking turns pair by pair over N held-out QQP pairs after
  a warm-up; p50 and p95 of each, and the reader's p50 as a share of the embedding's. A turn asks the reader once for
  each candidate that passes the gate and the conflict checks, and once for the nearest match below the gate (the
  audit log's what-if).
- memory: the process's resident set with the bundled model loaded and a first question embedded, then with the
  reader loaded and a first pair scored.

Both run on the deployment's EMBEDDING_BACKEND. The reader's onnx file is made first in a process of its own when it
is missing (its export imports PyTorch, which would otherwise count in this process's memory). The load average is
printed beside the figures: timings are indicative on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from common import ROOT, load_average, rss_mb

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")
os.environ.setdefault("KB_VAR_DIR", str(ROOT / "var" / "bench"))
os.environ.setdefault("LOG_LEVEL", "WARNING")
sys.path.insert(0, str(ROOT))

MAKE_FILE = (
    "import django; django.setup(); "
    "from conversations.dedup.duplicate_model import pair_model_default; "
    "from conversations.dedup.pair_reader import reader_score; "
    "assert reader_score(reader=pair_model_default().reader, question='a', stored='b') is not None"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-c", MAKE_FILE], check=True, cwd=ROOT)  # the onnx file, made outside this one

    import django

    django.setup()
    from conversations.dedup.duplicate_model import pair_model_default
    from conversations.dedup.pair_reader import reader_score
    from conversations.training.labelled_pairs import PAIRS, pairs_load
    from retrieval.embeddings import backend, embed_query

    reader = pair_model_default().reader
    if reader is None:
        raise SystemExit("the bundled model's head has no pair reader: nothing to measure")
    pairs = pairs_load(PAIRS)
    rows = [r for r, held in zip(pairs.rows, pairs.held_out, strict=True) if held][: args.pairs]
    before = rss_mb()
    embed_query(rows[0]["question1"])
    with_model = rss_mb()
    reader_score(reader=reader, question=rows[0]["question1"], stored=rows[0]["question2"])
    with_reader = rss_mb()
    for row in rows[:20]:  # warm-up
        embed_query(row["question1"])
        reader_score(reader=reader, question=row["question1"], stored=row["question2"])
    embedding, reading = [], []
    load_before = load_average()
    for row in rows:
        tick = time.perf_counter()
        embed_query(row["question2"])
        embedding.append((time.perf_counter() - tick) * 1000)
        tick = time.perf_counter()
        reader_score(reader=reader, question=row["question1"], stored=row["question2"])
        reading.append((time.perf_counter() - tick) * 1000)
    print(f"backend {backend()}; {len(rows)} held-out QQP pairs; load average {load_before} -> {load_average()}")
    for name, times in (("embed one question (baseline)", embedding), ("pair reader, one pair", reading)):
        print(f"  {name:32s} p50 {np.percentile(times, 50):6.2f} ms  p95 {np.percentile(times, 95):6.2f} ms")
    print(f"  reader p50 / embedding p50: {np.percentile(reading, 50) / np.percentile(embedding, 50):.2f}x")
    print(
        f"memory (RSS): Django {before:.0f} MB; with the bundled model {with_model:.0f} MB; "
        f"with its pair reader {with_reader:.0f} MB (+{with_reader - with_model:.0f} MB)"
    )


if __name__ == "__main__":
    main()
