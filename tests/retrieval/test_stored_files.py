"""Uploaded files that no document holds (a process died between writing the file and committing its row) are
deleted by the hourly sweep once old enough; a document's file, and a file young enough to belong to an upload
still committing, are kept."""

from __future__ import annotations

import os
import time

import pytest
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile

from retrieval import tasks
from retrieval.models import Document
from tests.retrieval.factories import kb_make

pytestmark = pytest.mark.django_db


def _aged(storage, name: str, seconds: float) -> None:
    path = storage.path(name)
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_file_no_document_holds_is_deleted_once_older_than_any_open_upload(
    api_client, tenant, settings, django_capture_on_commit_callbacks
):
    storage = Document._meta.get_field("source_file").storage
    kb = kb_make(tenant)
    with django_capture_on_commit_callbacks(execute=False):  # no worker needed: the file is what matters
        response = api_client.post(
            f"/api/v1/knowledge-bases/{kb.pk}/documents/",
            {"file": SimpleUploadedFile("kept.md", b"# Kept\n\nBody.", content_type="text/markdown")},
            format="multipart",
        )
    assert response.status_code == 202, response.content
    held = Document.objects.for_tenant(tenant).get(pk=response.json()["id"]).source_file.name
    # What an upload whose process died before its commit leaves: the file, and no row naming it.
    orphan = storage.save("documents/2026/01/dead-upload.md", ContentFile(b"# Dead\n\nBody."))
    young_orphan = storage.save("documents/2026/01/still-committing.md", ContentFile(b"# Young\n\nBody."))
    for name in (held, orphan):
        _aged(storage, name, settings.STORED_FILE_ORPHAN_SECONDS + 60)
    _aged(storage, young_orphan, settings.STORED_FILE_ORPHAN_SECONDS - 60)

    deleted = tasks.stored_files_orphaned_delete.apply().get()

    assert not storage.exists(orphan)
    assert storage.exists(held) and storage.exists(young_orphan)
    assert deleted >= 1
    storage.delete(young_orphan)
