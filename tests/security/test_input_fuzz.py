"""Hostile requests found by fuzzing the API: each was a 500 before its fix and must stay a clear 4xx that stores
nothing."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from django.test import override_settings

from kbplatform.parsers import charset_is_bytes_codec
from retrieval.models import Document
from retrieval.services import STORED_NAME_MAX_BYTES, stored_file_name
from tests.factories import KnowledgeBaseFactory
from tests.security.helpers import assert_refused
from tests.security.world import tenant_snapshot

KEYS_URL = "/api/v1/api-keys/"


# --- a charset that names a bytes-to-bytes codec -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("rot13", True),
        ("base64", True),
        ("zlib", True),
        ("uu_codec", True),
        ("hex", True),
        ("bz2", True),
        ("quopri", True),
        ("utf-8", False),
        ("UTF-8", False),
        ("utf-16", False),
        ("latin-1", False),
        ("cp1252", False),
        ("idna", False),
        ("no-such-charset", False),  # unknown names are ignored by Django, which then reads UTF-8
        ("", False),
    ],
)
def test_charset_is_bytes_codec(name, expected):
    assert charset_is_bytes_codec(name) is expected


@pytest.mark.django_db
@pytest.mark.parametrize("charset", ["rot13", "base64", "zlib", "uu_codec"])
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"name": "k"}'),
        (
            "multipart/form-data; boundary=kbb",
            b'--kbb\r\nContent-Disposition: form-data; name="name"\r\n\r\nk\r\n--kbb--\r\n',
        ),
    ],
    ids=["json", "multipart"],
)
def test_a_body_in_a_bytes_codec_charset_is_415_and_stores_nothing(api_client, tenant, charset, content_type, body):
    before = tenant_snapshot(tenant)
    response = api_client.generic("POST", KEYS_URL, body, content_type=f"{content_type}; charset={charset}")
    assert_refused(response, 415, "not a text encoding")
    assert tenant_snapshot(tenant) == before


def _wsgi_call(*, path: str, query: str, content_type: str) -> tuple[str, dict, bytes]:
    from kbplatform.wsgi import application

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_TYPE": content_type,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    started = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info=None) -> None:
        started.update(status=status, headers=dict(headers))

    body = b"".join(application(environ, start_response))
    return started["status"], started["headers"], body


def test_a_query_string_with_a_bytes_codec_charset_is_415_before_django_reads_it():
    """Django decodes the query string with the declared charset while it builds the request, before any middleware
    or view: `rot13` there raised LookupError out of the WSGI handler, a bare 500 from the server."""
    status, headers, body = _wsgi_call(
        path="/api/v1/audit-events/", query="action=answered", content_type="text/plain; charset=rot13"
    )
    assert status.startswith("415")
    assert headers["Content-Type"] == "application/json"
    assert "not a text encoding" in json.loads(body)["message"]


def test_under_asgi_too_a_bytes_codec_charset_is_415_before_django_reads_it():
    from asgiref.testing import ApplicationCommunicator

    from kbplatform.asgi import application

    async def call() -> list[dict]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/api/v1/audit-events/",
            "raw_path": b"/api/v1/audit-events/",
            "query_string": b"action=answered",
            "headers": [(b"content-type", b"text/plain; charset=rot13"), (b"host", b"testserver")],
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 1234),
        }
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        return [await communicator.receive_output(5), await communicator.receive_output(5)]

    start, body = asyncio.run(call())
    assert start["status"] == 415 and (b"content-type", b"application/json") in start["headers"]
    assert "not a text encoding" in json.loads(body["body"])["message"]


def test_a_text_charset_still_reaches_the_api(in_process_wsgi):
    status, _, body = _wsgi_call(path="/api/v1/whoami/", query="x=1", content_type="text/plain; charset=utf-8")
    assert status.startswith("401"), body


# --- more fields or files than Django reads ----------------------------------------------------------------------


def _multipart_parts(count: int, *, files: bool) -> bytes:
    disposition = 'name="file"; filename="f{}.txt"' if files else 'name="f{}"'
    parts = "".join(
        f"--kbb\r\nContent-Disposition: form-data; {disposition.format(i)}\r\n\r\nvalue\r\n" for i in range(count)
    )
    return (parts + "--kbb--\r\n").encode()


@pytest.mark.django_db
@override_settings(DATA_UPLOAD_MAX_NUMBER_FIELDS=5, DATA_UPLOAD_MAX_NUMBER_FILES=2)
@pytest.mark.parametrize(
    ("method", "url", "body", "content_type", "words"),
    [
        ("GET", "/api/v1/audit-events/?" + "&".join(f"a{i}=1" for i in range(6)), b"", "", "more than 5 fields"),
        ("GET", "/api/v1/whoami/?" + "&".join(f"a{i}=1" for i in range(6)), b"", "", "more than 5 fields"),
        (
            "POST",
            KEYS_URL,
            "&".join(f"a{i}=1" for i in range(6)).encode(),
            "application/x-www-form-urlencoded",
            "more than 5 fields",
        ),
        ("POST", "{documents}", _multipart_parts(6, files=False), "multipart/form-data; boundary=kbb", "5 fields"),
        ("POST", "{documents}", _multipart_parts(3, files=True), "multipart/form-data; boundary=kbb", "2 files"),
    ],
    ids=["query-list", "query-whoami", "form", "multipart-fields", "multipart-files"],
)
def test_more_fields_or_files_than_django_reads_is_400_and_stores_nothing(
    api_client, tenant, method, url, body, content_type, words
):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    url = url.replace("{documents}", f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/")
    before = tenant_snapshot(tenant)
    response = api_client.generic(method, url, body, content_type=content_type)
    assert_refused(response, 400, words)
    assert tenant_snapshot(tenant) == before


# --- uploaded file names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_name", "stored"),
    [
        ("notes.md", "notes.md"),
        ("my notes.md", "my_notes.md"),
        ("résumé.txt", "résumé.txt"),
        ("   ", "upload"),
        ("!!!", "upload"),
        ("", "upload"),
        ("@#$.pdf", "upload.pdf"),
        ("b" * 300 + ".txt", "b" * (STORED_NAME_MAX_BYTES - 4) + ".txt"),
        ("é" * 200 + ".txt", "é" * ((STORED_NAME_MAX_BYTES - 4) // 2) + ".txt"),
        ("x." + "e" * 40, "x." + "e" * 15),
    ],
)
def test_stored_file_name(client_name, stored):
    assert stored_file_name(client_name) == stored
    assert len(stored_file_name(client_name).encode()) <= STORED_NAME_MAX_BYTES


@pytest.mark.django_db
@pytest.mark.parametrize(
    "filename",
    [
        "b" * 251 + ".txt",  # fits once; the storage's suffix for the second took it past 255 bytes
        "é" * 200 + ".txt",  # 404 bytes: past the file system's 255 per name
        "文" * 100 + ".txt",
        "   ",  # Django cannot derive a storage name from it
        "@#$",
    ],
    ids=["255-ascii-twice", "long-latin", "long-cjk", "blank", "punctuation"],
)
def test_any_file_name_is_stored_and_kept_as_sent(api_client, tenant, settings, filename):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    for _ in range(2):
        body = (
            b'--kbb\r\nContent-Disposition: form-data; name="file"; filename="'
            + filename.encode()
            + b'"\r\nContent-Type: text/plain\r\n\r\nPlain text for the index.\r\n--kbb--\r\n'
        )
        response = api_client.generic(
            "POST",
            f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
            body,
            content_type="multipart/form-data; boundary=kbb",
        )
        assert response.status_code == 202, response.content[:300]
        document = Document.objects.for_tenant(tenant).get(pk=response.json()["id"])
        assert document.source_filename == filename
        assert document.source_file.read() == b"Plain text for the index."
        assert Path(document.source_file.path).resolve().is_relative_to(Path(settings.MEDIA_ROOT).resolve())


@pytest.mark.django_db
def test_a_part_content_type_postgresql_cannot_store_is_dropped(api_client, tenant):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    body = (
        b'--kbb\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        b"Content-Type: text/pl\x00ain\r\n\r\nPlain text.\r\n--kbb--\r\n"
    )
    response = api_client.generic(
        "POST",
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
        body,
        content_type="multipart/form-data; boundary=kbb",
    )
    assert response.status_code == 202, response.content[:300]
    assert Document.objects.for_tenant(tenant).get(pk=response.json()["id"]).content_type == ""


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("title", "status"),
    [(b"caf\xe9", 202), (b"bad \x81 byte", 400)],  # 0x81 is no character in cp1252
    ids=["cp1252-text", "cp1252-undefined-byte"],
)
def test_a_multipart_body_in_another_charset_is_read_in_it_and_never_stored_garbled(api_client, tenant, title, status):
    knowledge_base = KnowledgeBaseFactory(tenant=tenant)
    body = (
        b'--kbb\r\nContent-Disposition: form-data; name="title"\r\n\r\n' + title + b"\r\n"
        b'--kbb\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\nPlain text.\r\n--kbb--\r\n"
    )
    response = api_client.generic(
        "POST",
        f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/",
        body,
        content_type="multipart/form-data; boundary=kbb; charset=cp1252",
    )
    if status == 400:
        assert_refused(response, 400, "not valid CP1252")
        assert not Document.objects.for_tenant(tenant).exists()
    else:
        assert response.status_code == 202, response.content[:300]
        assert Document.objects.for_tenant(tenant).get().title == "café"
