"""Vectors by (tenant, model, hash of the model's input), stored in the database: unchanged text is never embedded
twice.

The key hashes what the model reads (`embeddings.model_input` of the text: long runs broken by spaces, Chinese in
Simplified characters for the multilingual model), not the stored text. A vector is then never served for an input it
was not made from, whatever the text was stored as: a text with a long run and its broken form (as a chunk of an
earlier release stored it) share one entry, and an entry made when the model read the text unbroken, or a Traditional
text as written, is never found.

Why the database and not Redis: the cache must outlive a Redis flush (Redis is only a hot copy here), and
a knowledge-base rebuild after a model-neutral change (new collection, Milvus loss) then costs no encoding.
Why per tenant, and why purged: see `EmbeddingCacheEntry`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

import numpy as np
from django.db.models import Exists, OuterRef
from django.utils import timezone

from retrieval import embeddings
from retrieval.chunking import text_hash
from retrieval.models import Chunk, EmbeddingCacheEntry

logger = logging.getLogger(__name__)

LOOKUP_BATCH = 500
PURGE_BATCH = 1000
# An entry younger than this is kept even when no chunk has its text: an ingestion run in flight may be about to
# write (or rewrite) the chunks it was made for.
PURGE_GRACE = timedelta(hours=1)


def embeddings_cached(
    *, tenant_id: int, texts: Sequence[str], model_identity: str, model: str | None = None
) -> tuple[np.ndarray, int]:
    """Normalised vectors for `texts` (rows in the same order) and how many were encoded now. Misses are
    encoded in one call by `model` and stored for this tenant; a concurrent writer of the same entry is ignored (same
    vector). `model_identity` is `embeddings.model_identity(model)`."""
    input_hashes = [text_hash(embeddings.model_input(text, model)) for text in texts]
    found: dict[str, np.ndarray] = {}
    unique_hashes = list(dict.fromkeys(input_hashes))
    entries = EmbeddingCacheEntry.objects.filter(tenant_id=tenant_id, model_name=model_identity)
    for start in range(0, len(unique_hashes), LOOKUP_BATCH):
        rows = entries.filter(text_hash__in=unique_hashes[start : start + LOOKUP_BATCH]).values_list(
            "text_hash", "vector"
        )
        for input_hash, vector in rows:
            found[input_hash] = np.frombuffer(bytes(vector), dtype=np.float32)
    missing: dict[str, str] = {}
    for text, input_hash in zip(texts, input_hashes, strict=True):
        if input_hash not in found and input_hash not in missing:
            missing[input_hash] = text
    if missing:
        encoded = embeddings.embed_texts(list(missing.values()), model=model)
        new_entries = []
        for input_hash, vector in zip(missing, encoded, strict=True):
            found[input_hash] = vector
            new_entries.append(
                EmbeddingCacheEntry(
                    tenant_id=tenant_id,
                    model_name=model_identity,
                    text_hash=input_hash,
                    vector=vector.astype(np.float32).tobytes(),
                )
            )
        EmbeddingCacheEntry.objects.bulk_create(new_entries, batch_size=LOOKUP_BATCH, ignore_conflicts=True)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32), 0
    return np.vstack([found[input_hash] for input_hash in input_hashes]), len(missing)


def embedding_cache_purge(*, grace: timedelta = PURGE_GRACE, batch_size: int = PURGE_BATCH) -> int:
    """Delete the entries whose text no chunk of their tenant has any more (deleted or re-chunked documents and
    knowledge bases), older than `grace`; returns how many. A chunk keeps the entry of its text as the model reads
    it: its `content_hash`, or its `model_input_hash` when the model reads the text otherwise (`model_input`). Walks the
    table by primary key in batches, so it never holds long locks and a run cut short loses nothing (the next one
    starts over)."""
    cutoff = timezone.now() - grace
    chunks = Chunk.objects.unscoped().filter(tenant_id=OuterRef("tenant_id"))
    read_as_stored = chunks.filter(content_hash=OuterRef("text_hash"))
    # Its own clause names the partial index's condition, so the index (of the few chunks read broken) is used.
    read_broken = chunks.exclude(model_input_hash="").filter(model_input_hash=OuterRef("text_hash"))
    # Crosses tenants on purpose: each entry is matched against its own tenant's chunks only.
    entries = EmbeddingCacheEntry.objects.unscoped()
    deleted = 0
    last = 0
    while True:
        ids = list(entries.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            break
        last = ids[-1]
        unused = entries.filter(pk__in=ids, created_at__lt=cutoff)
        count, _ = unused.exclude(Exists(read_as_stored)).exclude(Exists(read_broken)).delete()
        deleted += count
    if deleted:
        logger.info("embedding cache: %s entries no chunk uses any more were deleted", deleted)
    return deleted
