"""Bulk imports (`manage.py ingest`, `documents_create_bulk`) with odd input: no traceback, no half-written import,
no file left on disk for a row that was not stored. No worker: documents are only queued (`--no-wait`)."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.core.management import CommandError, call_command

from kbplatform.errors import ConflictError
from retrieval.models import Document
from retrieval.services import BulkDocument, documents_create_bulk
from tests.retrieval.factories import kb_make

pytestmark = pytest.mark.django_db


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _stored_files(media) -> list:
    return [path for path in media.rglob("*") if path.is_file()] if media.exists() else []


def test_a_path_too_long_for_an_external_id_is_refused_with_the_reason_and_stores_nothing(tenant, tmp_path, media):
    folder = tmp_path / "docs"
    deep = folder.joinpath(*["chapter"] * 40)
    deep.mkdir(parents=True)
    (folder / "intro.txt").write_text("Sourdough needs a lively starter.")
    (deep / "notes.txt").write_text("Baguettes need steam in the oven.")

    with pytest.raises(CommandError) as error:
        call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", no_wait=True, stdout=io.StringIO())

    assert "255 characters" in str(error.value) and "chapter/chapter" in str(error.value)
    assert not Document.objects.for_tenant(tenant).exists()
    assert _stored_files(media) == []


def test_files_of_an_import_that_could_not_be_stored_are_removed(tenant, media, monkeypatch):
    kb = kb_make(tenant, name="racing-imports")
    bulk_create = Document.objects.bulk_create

    def another_import_got_there_first(documents, **kwargs):
        Document.objects.create(tenant=tenant, knowledge_base=kb, title="b", external_id="b.txt")
        return bulk_create(documents, **kwargs)

    monkeypatch.setattr(Document.objects, "bulk_create", another_import_got_there_first)
    documents = [
        BulkDocument(title=name, external_id=name, file_name=name, file_bytes=f"text of {name}".encode())
        for name in ("a.txt", "b.txt")
    ]
    with pytest.raises(ConflictError, match="run the import again"):
        documents_create_bulk(tenant=tenant, knowledge_base=kb, documents=documents)
    assert _stored_files(media) == []


def test_a_nul_in_a_beir_row_is_dropped_instead_of_failing_the_import(tenant, tmp_path, media):
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"_id": "d0", "title": "Clean", "text": "An ordinary abstract."},
        {"_id": "d1", "title": "Ti\u0000tle", "text": "An abstract with a stray \u0000 in it."},
    ]
    corpus.write_text("\n".join(json.dumps(row) for row in rows))

    out = io.StringIO()
    call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=out)

    assert "Queued 2 document(s)" in out.getvalue()
    document = Document.objects.for_tenant(tenant).get(external_id="d1")
    assert document.title == "Title" and document.source_text == "Title\n\nAn abstract with a stray  in it."


def test_a_file_over_the_limit_is_recorded_failed_without_being_read(tenant, tmp_path, media, settings, monkeypatch):
    settings.MAX_UPLOAD_BYTES = 1000
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("Sourdough needs a lively starter.")
    (folder / "video.mp4").write_bytes(b"\x00" * 5000)  # a 20 GB recording left in the folder, in miniature
    read_bytes = type(folder).read_bytes

    def read_within_memory(path):
        if path.stat().st_size > settings.MAX_UPLOAD_BYTES:
            raise MemoryError(f"{path.name} read whole")
        return read_bytes(path)

    monkeypatch.setattr(type(folder), "read_bytes", read_within_memory)
    out = io.StringIO()
    call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", no_wait=True, stdout=out)

    assert "Queued 2 document(s)" in out.getvalue()
    video = Document.objects.for_tenant(tenant).get(external_id="video.mp4")
    assert video.status == "failed" and video.size_bytes == 5000
    assert "The file is 5000 bytes; the limit is 1000 bytes." in video.error_message
    assert not video.source_file and [path.name for path in _stored_files(media)] == ["notes.txt"]


def test_a_file_whose_name_is_not_utf8_is_imported_with_the_others(tenant, tmp_path, media):
    """A name written in Latin-1 on a UTF-8 file system reaches Python with a lone surrogate for each byte it cannot
    decode; PostgreSQL refused it, and the import stopped with a traceback at that file's group."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "intro.txt").write_text("Sourdough needs a lively starter.")
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"Cafe notes: espresso needs fine grounds.")

    out = io.StringIO()
    call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", no_wait=True, stdout=out)

    assert "Queued 2 document(s)" in out.getvalue()
    assert sorted(Document.objects.for_tenant(tenant).values_list("external_id", flat=True)) == [
        "caf\ufffd.txt",
        "intro.txt",
    ]
    again = io.StringIO()
    call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", no_wait=True, stdout=again)
    assert "Queued 0 document(s)" in again.getvalue() and "skipped 2 already there" in again.getvalue()


def test_a_lone_surrogate_in_a_beir_row_is_replaced_instead_of_failing_the_import(tenant, tmp_path, media):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        '{"_id": "d0", "title": "Clean", "text": "An ordinary abstract."}\n'
        '{"_id": "d1", "title": "Half \\ud835 pair", "text": "Math \\ud835 in it."}\n'
    )

    out = io.StringIO()
    call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=out)

    assert "Queued 2 document(s)" in out.getvalue()
    document = Document.objects.for_tenant(tenant).get(external_id="d1")
    assert document.title == "Half \ufffd pair" and document.source_text == "Half \ufffd pair\n\nMath \ufffd in it."


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"_id": "d1", "text": 5}', '"text" is not a string'),
        ('{"_id": "d1", "title": ["a"], "text": "x"}', '"title" is not a string'),
        ('{"_id": null, "text": "x"}', "not a BEIR row with an _id"),
        ('{"_id": {"a": 1}, "text": "x"}', "not a BEIR row with an _id"),
    ],
    ids=["number-text", "list-title", "null-id", "object-id"],
)
def test_a_beir_row_of_the_wrong_shape_is_refused_naming_its_line(tenant, tmp_path, media, line, fragment):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d0", "text": "An ordinary abstract."}\n' + line + "\n")

    with pytest.raises(CommandError) as error:
        call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=io.StringIO())

    assert f"{corpus}:2:" in str(error.value) and fragment in str(error.value)
    assert not Document.objects.for_tenant(tenant).exists()


def test_a_beir_file_that_is_not_utf8_is_refused_naming_its_line(tenant, tmp_path, media):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"_id": "d0", "text": "plain"}\n' + '{"_id": "d1", "text": "café"}\n'.encode("latin-1"))

    with pytest.raises(CommandError) as error:
        call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=io.StringIO())

    assert f"{corpus}:2:" in str(error.value) and "UTF-8" in str(error.value)
    assert not Document.objects.for_tenant(tenant).exists()


def test_a_file_that_cannot_be_read_is_reported_and_the_rest_are_imported(tenant, tmp_path, media, monkeypatch):
    """A file without read permission, or removed while the import runs, stopped the import with a traceback at its
    group of 64 files, after the groups before it were queued."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("a.txt", "locked.txt", "z.txt"):
        (folder / name).write_text(f"Notes in {name}.")
    read_bytes = type(folder).read_bytes

    def locked_out(path):  # the tests run as root, whom a chmod does not stop
        if path.name == "locked.txt":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(type(folder), "read_bytes", locked_out)
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", no_wait=True, stdout=out, stderr=err)

    assert "Queued 2 document(s)" in out.getvalue()
    assert "could not read locked.txt (Permission denied)" in err.getvalue()
    assert sorted(Document.objects.for_tenant(tenant).values_list("external_id", flat=True)) == ["a.txt", "z.txt"]
    monkeypatch.setattr(type(folder), "read_bytes", read_bytes)  # the permission fixed: a re-run takes the file
    call_command("ingest", str(folder), tenant=tenant.slug, kb="bakery", no_wait=True, stdout=io.StringIO())
    assert Document.objects.for_tenant(tenant).filter(external_id="locked.txt").exists()


def test_a_repeated_id_in_the_input_is_reported_as_such_not_as_already_there(tenant, tmp_path, media):
    """The second row of a repeated `_id` is left out (the first is kept); the command said "skipped 1 already there",
    so an operator checking the knowledge base for it found a document with the other row's text."""
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"_id": "d0", "text": "First."}, {"_id": "d1", "text": "Second."}, {"_id": "d0", "text": "Other text."}]
    corpus.write_text("\n".join(json.dumps(row) for row in rows))

    out = io.StringIO()
    call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=out)

    assert "Queued 2 document(s)" in out.getvalue() and "already there" not in out.getvalue()
    assert "left out 1 whose external id an earlier one in the input has (the first is kept)" in out.getvalue()
    assert Document.objects.for_tenant(tenant).get(external_id="d0").source_text == "First."
    again = io.StringIO()
    call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=again)
    assert "skipped 2 already there" in again.getvalue() and "left out 1" in again.getvalue()


def test_a_beir_file_named_in_capitals_is_read_as_rows_not_one_document(tenant, tmp_path, media):
    corpus = tmp_path / "CORPUS.JSONL"
    corpus.write_text('{"_id": "d0", "text": "First."}\n{"_id": "d1", "text": "Second."}\n')

    call_command("ingest", str(corpus), tenant=tenant.slug, kb="papers", no_wait=True, stdout=io.StringIO())

    assert sorted(Document.objects.for_tenant(tenant).values_list("external_id", flat=True)) == ["d0", "d1"]


def test_a_knowledge_base_name_the_model_refuses_is_a_command_error(tenant, tmp_path, media):
    (tmp_path / "a.txt").write_text("text")
    with pytest.raises(CommandError, match="name"):
        call_command("ingest", str(tmp_path), tenant=tenant.slug, kb="k" * 300, no_wait=True, stdout=io.StringIO())
    assert not Document.objects.for_tenant(tenant).exists()
