"""Upload handling: a file past the document size limit is counted, not kept.

Django spools an upload whole (to memory, then to a temporary file) before a view sees it, so a file far over
`MAX_UPLOAD_BYTES` would take that much of the web's disk only to be refused. This handler, first in
`FILE_UPLOAD_HANDLERS`, passes a file's bytes on to the usual handlers up to the limit and drops the rest, and hands
the view a file that knows its full size and holds nothing: `retrieval.services.document_create` records it as failed
with both sizes, as it did, without reading it. The bytes still cross the network: a proxy's body limit stops that.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler


class OversizeUpload(UploadedFile):
    """An upload over the limit: its name, declared type and full size, and no content."""

    def __init__(self, *, name: str, content_type: str | None, size: int, charset: str | None) -> None:
        super().__init__(file=None, name=name, content_type=content_type, size=size, charset=charset)

    def open(self, mode: str | None = None) -> NoReturn:
        raise ValueError("An upload over the size limit keeps no content.")

    def chunks(self, chunk_size: int | None = None) -> NoReturn:
        raise ValueError("An upload over the size limit keeps no content.")

    def read(self, *args: object, **kwargs: object) -> NoReturn:
        raise ValueError("An upload over the size limit keeps no content.")

    def close(self) -> None:
        pass


class UploadSizeLimitHandler(FileUploadHandler):
    """Counts each file; once one passes MAX_UPLOAD_BYTES, the rest of it goes nowhere and it ends as an
    `OversizeUpload`. A file within the limit goes through the next handlers untouched."""

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        self.received = 0
        self.oversize = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > settings.MAX_UPLOAD_BYTES:
            self.oversize = True
        return None if self.oversize else raw_data

    def file_complete(self, file_size: int) -> UploadedFile | None:
        if not self.oversize:
            return None  # the next handler's file
        return OversizeUpload(
            name=self.file_name, content_type=self.content_type, size=self.received, charset=self.charset
        )
