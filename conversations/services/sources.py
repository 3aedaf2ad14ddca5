"""What a turn shows of a passage, and whether a stored answer's sources are still what it cited."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from conversations.state import (
    StoredAnswer,
)
from retrieval.models import Chunk
from retrieval.selectors import (
    ChunkHit,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)


@dataclass
class SourceView:
    chunk_id: int
    document_id: int
    external_id: str | None
    document_external_id: str | None
    score: float | None
    text: str


def stored_sources(*, tenant: Tenant, stored: StoredAnswer) -> list[SourceView] | None:
    """The sources a stored answer cites, in its order, or None when any of them changed since (deleted, disabled,
    or re-indexed or edited to another content hash): such an answer is never served again. One query does both."""
    ids = stored.source_chunk_ids
    rows = {
        row[0]: row
        for row in Chunk.objects.for_tenant(tenant)
        .filter(pk__in=ids, enabled=True)
        .values_list("pk", "document_id", "external_id", "document__external_id", "text", "content_hash")
    }
    views = []
    for chunk_id in ids:
        row = rows.get(chunk_id)
        cited = stored.source_chunks.get(str(chunk_id)) or {}
        if row is None or row[5] != cited.get("hash"):
            return None
        views.append(
            SourceView(
                chunk_id=chunk_id,
                document_id=row[1],
                external_id=row[2],
                document_external_id=row[3],
                score=cited.get("score"),
                text=row[4],
            )
        )
    return views


def source_view_of_hit(hit: ChunkHit) -> SourceView:
    return SourceView(
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        external_id=hit.external_id,
        document_external_id=hit.document_external_id,
        score=hit.score,
        text=hit.text,
    )
