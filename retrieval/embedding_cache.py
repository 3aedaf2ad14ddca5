"""Vectors by (model, text hash), stored in the database: unchanged text is never embedded twice.

Why the database and not Redis: the cache must outlive a Redis flush (Redis is only a hot copy here), and
a knowledge-base rebuild after a model-neutral change (new collection, Milvus loss) then costs no encoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retrieval import embeddings
from retrieval.models import EmbeddingCacheEntry

LOOKUP_BATCH = 500


def embeddings_cached(*, texts: Sequence[str], text_hashes: Sequence[str], model_name: str) -> tuple[np.ndarray, int]:
    """Normalised vectors for `texts` (rows in the same order) and how many were encoded now. Misses are
    encoded in one call and stored; a concurrent writer of the same entry is ignored (same vector)."""
    found: dict[str, np.ndarray] = {}
    unique_hashes = list(dict.fromkeys(text_hashes))
    for start in range(0, len(unique_hashes), LOOKUP_BATCH):
        rows = EmbeddingCacheEntry.objects.filter(
            model_name=model_name, text_hash__in=unique_hashes[start : start + LOOKUP_BATCH]
        ).values_list("text_hash", "vector")
        for text_hash, vector in rows:
            found[text_hash] = np.frombuffer(bytes(vector), dtype=np.float32)
    missing: dict[str, str] = {}
    for text, text_hash in zip(texts, text_hashes, strict=True):
        if text_hash not in found and text_hash not in missing:
            missing[text_hash] = text
    if missing:
        encoded = embeddings.embed_texts(list(missing.values()))
        new_entries = []
        for text_hash, vector in zip(missing, encoded, strict=True):
            found[text_hash] = vector
            vector_bytes = vector.astype(np.float32).tobytes()
            new_entries.append(EmbeddingCacheEntry(model_name=model_name, text_hash=text_hash, vector=vector_bytes))
        EmbeddingCacheEntry.objects.bulk_create(new_entries, batch_size=LOOKUP_BATCH, ignore_conflicts=True)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32), 0
    return np.vstack([found[text_hash] for text_hash in text_hashes]), len(missing)
