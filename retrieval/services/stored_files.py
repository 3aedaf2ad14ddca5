"""Uploaded files that no document holds: deleted once they are old enough that no upload can still be committing.

An upload's file is written before its row commits (the row must name the file it holds). Every failure the upload
sees deletes the file again, the failed commit included; what none can see is the process dying between the two (a
worker killed, a machine lost), which leaves a file that nothing names. The hourly sweep finds such files and deletes
those older than STORED_FILE_ORPHAN_SECONDS: a younger one may belong to an upload whose transaction is still open.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.core.files.storage import Storage
from django.utils import timezone

from retrieval.models import Document

logger = logging.getLogger(__name__)

UPLOADS_ROOT = "documents"  # where Document.source_file's upload_to puts every upload
_BATCH = 1000


def _stored_names(storage: Storage, folder: str) -> Iterator[str]:
    try:
        folders, files = storage.listdir(folder)
    except FileNotFoundError:
        return
    for name in files:
        yield f"{folder}/{name}"
    for child in folders:
        yield from _stored_names(storage, f"{folder}/{child}")


def stored_files_orphaned_delete() -> int:
    """Delete the uploaded files that no document names and that are older than STORED_FILE_ORPHAN_SECONDS. Crosses
    tenants by design (the storage is the platform's); returns how many were deleted."""
    storage = Document._meta.get_field("source_file").storage
    cutoff = timezone.now() - timedelta(seconds=settings.STORED_FILE_ORPHAN_SECONDS)
    deleted = 0
    batch: list[str] = []

    def sweep(names: list[str]) -> int:
        held = set(Document.objects.unscoped().filter(source_file__in=names).values_list("source_file", flat=True))
        count = 0
        for name in names:
            if name in held:
                continue
            try:
                if storage.get_modified_time(name) >= cutoff:
                    continue
                storage.delete(name)
            except FileNotFoundError:
                continue
            except OSError:
                logger.warning("could not delete the orphaned upload %s", name, exc_info=True)
                continue
            count += 1
        return count

    for name in _stored_names(storage, UPLOADS_ROOT):
        batch.append(name)
        if len(batch) >= _BATCH:
            deleted += sweep(batch)
            batch = []
    if batch:
        deleted += sweep(batch)
    if deleted:
        logger.info("deleted %s uploaded files that no document holds", deleted)
    return deleted
