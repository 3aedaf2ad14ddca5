"""What a turn shows of a passage, and whether a stored answer's sources are still what it cited."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from conversations.turn.state import (
    StoredAnswer,
)
from kbplatform.row_reads import values_by_keys
from retrieval.models import Chunk
from retrieval.selectors import (
    ChunkHit,
    chunk_content_hashes,
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
    # The question's cosine to the chunk when the turn searched it (`ChunkHit.similarity`); None when not known (a
    # stored answer's sources shown from a turn recorded without it).
    similarity: float | None = None


# The columns of a cited chunk that the sources check compares and a served answer shows; then whether it is enabled.
_SOURCE_COLUMNS = ("pk", "document_id", "external_id", "document__external_id", "text", "content_hash", "enabled")


@dataclass(frozen=True)
class SourceRows:
    """Chunk rows read ahead in a turn: `asked`, the ids read; `rows`, the enabled chunks among them by id (an id
    asked and not there is a chunk deleted or disabled), for sources checks; `hashes`, the content hash of every chunk
    among them that exists, disabled or not, for the texts exclusion leaves out (`content_hashes_of`)."""

    asked: frozenset[int]
    rows: dict[int, tuple]
    hashes: dict[int, str]


def stored_source_rows_read(*, tenant: Tenant, chunk_ids: Collection[int]) -> SourceRows:
    """One query for the rows of every chunk in `chunk_ids` (none when it is empty): those `stored_sources` checks and
    those whose texts `content_hashes_of` looks up."""
    if not chunk_ids:
        return SourceRows(asked=frozenset(), rows={}, hashes={})
    rows = _chunk_rows(tenant=tenant, chunk_ids=chunk_ids)
    return SourceRows(
        asked=frozenset(chunk_ids),
        rows={row[0]: row for row in rows if row[6]},
        hashes={row[0]: row[5] for row in rows},
    )


def _chunk_rows(*, tenant: Tenant, chunk_ids: Collection[int]) -> list[tuple]:
    """The tenant's chunks among `chunk_ids`, each row `_SOURCE_COLUMNS`: one statement written once per process
    (`values_by_keys`)."""
    return values_by_keys(model=Chunk, columns=_SOURCE_COLUMNS, keys=chunk_ids, tenant_id=tenant.pk)


def _source_rows(*, tenant: Tenant, chunk_ids: Collection[int]) -> dict[int, tuple]:
    """The tenant's enabled chunks among `chunk_ids` by id."""
    return {row[0]: row for row in _chunk_rows(tenant=tenant, chunk_ids=chunk_ids) if row[6]}


def content_hashes_of(*, tenant: Tenant, chunk_ids: Collection[int], read_ahead: SourceRows | None = None) -> set[str]:
    """The content hashes of the tenant's chunks among `chunk_ids` (chunks deleted since are left out): from
    `read_ahead` when it read them all, else one query (`chunk_content_hashes`)."""
    if not chunk_ids:
        return set()
    if read_ahead is not None and read_ahead.asked.issuperset(chunk_ids):
        return {read_ahead.hashes[chunk_id] for chunk_id in chunk_ids if chunk_id in read_ahead.hashes}
    return chunk_content_hashes(tenant=tenant, chunk_ids=chunk_ids)


def stored_sources(
    *, tenant: Tenant, stored: StoredAnswer, read_ahead: SourceRows | None = None
) -> list[SourceView] | None:
    """The sources a stored answer cites, in its order, or None when any of them changed since (deleted, disabled,
    or re-indexed or edited to another content hash): such an answer is never served again. One query does both,
    or none when `read_ahead` (rows read earlier in the same turn) covers every cited chunk."""
    ids = stored.source_chunk_ids
    if read_ahead is not None and read_ahead.asked.issuperset(ids):
        rows = read_ahead.rows
    else:
        rows = _source_rows(tenant=tenant, chunk_ids=ids)
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
                similarity=cited.get("similarity"),
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
        similarity=hit.similarity,
    )
