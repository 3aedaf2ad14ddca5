"""Turning an uploaded file into text: the type is decided by the bytes, not by the file name.

Pure functions of (bytes, file name): no database, no model. Anything a person's file can be wrong about ends
in `DocumentParseError` with a message that person understands; the pipeline stores it as the document's error.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbplatform import text_encoding
from kbplatform.text import text_storable

if TYPE_CHECKING:
    from docx.oxml.xmlchemy import BaseOxmlElement
    from docx.types import ProvidesStoryPart

PDF_MAGIC = b"%PDF-"
ZIP_MAGIC = b"PK\x03\x04"
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # legacy .doc/.xls, and every password-protected Office file
MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")


class DocumentParseError(Exception):
    """The file cannot be turned into text; the message is meant for the person who uploaded it."""


class FileKind:
    TEXT = "text"
    MARKDOWN = "markdown"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"


@dataclass(frozen=True)
class ParsedDocument:
    kind: str
    text: str

    @property
    def is_markdown(self) -> bool:
        return self.kind == FileKind.MARKDOWN


def size_describe(size_bytes: int) -> str:
    return f"{size_bytes / (1024 * 1024):.1f} MB" if size_bytes >= 1024 * 1024 else f"{size_bytes} bytes"


def file_size_check(*, size_bytes: int, max_bytes: int) -> None:
    if size_bytes > max_bytes:
        raise DocumentParseError(
            f"The file is {size_describe(size_bytes)}; the limit is {size_describe(max_bytes)}. "
            "Split it into smaller files."
        )


def file_kind_detect(data: bytes, filename: str = "") -> str:
    """The kind of `data`, from its leading bytes first; the name only tells Markdown and HTML from plain text.

    Raises DocumentParseError for kinds the platform does not read (archives, legacy or encrypted Office files,
    images and other binaries)."""
    name = filename.lower()
    if data.startswith(PDF_MAGIC):
        return FileKind.PDF
    if data.startswith(ZIP_MAGIC):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                names = set(archive.namelist())
        except (zipfile.BadZipFile, ValueError) as exc:
            raise DocumentParseError("The file looks like a Word document or ZIP archive but is damaged.") from exc
        if "word/document.xml" in names:
            return FileKind.DOCX
        raise DocumentParseError(
            "The file is a ZIP archive, not a supported document. Upload PDF, DOCX, HTML, Markdown or text."
        )
    if data.startswith(OLE2_MAGIC):
        raise DocumentParseError(
            "The file is a password-protected Office document or an old .doc file. "
            "Remove the password and save it as .docx or PDF, then upload it again."
        )
    head = data[:8192]
    if b"\x00" in head and not _looks_like_utf16(head):
        raise DocumentParseError(
            "The file is binary (not text, PDF or DOCX). Upload PDF, DOCX, HTML, Markdown or plain text."
        )
    if name.endswith(MARKDOWN_SUFFIXES):
        return FileKind.MARKDOWN
    if name.endswith(HTML_SUFFIXES) or _looks_like_html(head):
        return FileKind.HTML
    return FileKind.TEXT


def _looks_like_utf16(head: bytes) -> bool:
    return head.startswith((b"\xff\xfe", b"\xfe\xff")) or text_encoding.utf16_without_bom(head) is not None


def _looks_like_html(head: bytes) -> bool:
    start = head.lstrip()[:512].lower()
    return start.startswith((b"<!doctype html", b"<html")) or (b"<html" in start and b"<body" in head.lower())


def text_decode(data: bytes) -> str:
    """`text_encoding.text_decode`, its refusal a DocumentParseError for the person who uploaded the file."""
    try:
        return text_encoding.text_decode(data)
    except text_encoding.UnreadableTextError as exc:
        raise DocumentParseError(str(exc)) from exc


def html_text(markup: str) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(markup, "html.parser")
    for element in soup(["script", "style", "noscript", "template", "head"]):
        element.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


def pdf_text(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # An owner password alone (print/copy restrictions) opens with the empty user password.
            try:
                opened = reader.decrypt("")
            except Exception as exc:  # pypdf raises several types for unsupported encryption
                raise DocumentParseError(_ENCRYPTED_PDF) from exc
            if not opened:
                raise DocumentParseError(_ENCRYPTED_PDF)
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentParseError:
        raise
    except FileNotDecryptedError as exc:
        raise DocumentParseError(_ENCRYPTED_PDF) from exc
    except (PdfReadError, Exception) as exc:  # a damaged PDF fails anywhere inside pypdf
        raise DocumentParseError(f"The PDF is damaged and cannot be read ({type(exc).__name__}).") from exc
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text:
        raise DocumentParseError(
            "The PDF has no extractable text (it may be scanned images). Run OCR on it or upload the text."
        )
    return text


_ENCRYPTED_PDF = "The PDF is password-protected. Remove the password and upload it again."


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
# Wrappers whose content Word shows as if they were not there: content controls, custom XML, tracked insertions.
_DOCX_TRANSPARENT = (f"{_W}sdt", f"{_W}customXml", f"{_W}ins", f"{_W}smartTag")
# Runs Word does not show as text: the old side of a tracked move, and a fallback copy of content shown otherwise.
_DOCX_HIDDEN = (f"{_W}moveFrom", f"{_W}del", _MC_FALLBACK)


def _docx_unwrapped(element: BaseOxmlElement) -> Iterator[BaseOxmlElement]:
    """The children of `element` with content controls, custom XML and tracked insertions opened up."""
    for child in element.iterchildren():
        if child.tag == f"{_W}sdt":
            content = child.find(f"{_W}sdtContent")
            if content is not None:
                yield from _docx_unwrapped(content)
        elif child.tag in _DOCX_TRANSPARENT:
            yield from _docx_unwrapped(child)
        else:
            yield child


def _docx_paragraph_text(paragraph: BaseOxmlElement) -> str:
    """The text Word shows for a paragraph: its runs, also those inside hyperlinks, fields, inline content controls and
    tracked insertions; not tracked deletions, nor paragraphs of text boxes anchored in it."""
    parts = []
    for run in paragraph.iter(f"{_W}r"):
        owner = next(run.iterancestors(f"{_W}p"), None)
        if owner is not paragraph or any(ancestor.tag in _DOCX_HIDDEN for ancestor in run.iterancestors()):
            continue
        for piece in run.iterchildren(f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr"):
            parts.append(piece.text or "" if piece.tag == f"{_W}t" else "\t" if piece.tag == f"{_W}tab" else "\n")
    return "".join(parts)


def _docx_blocks(container: BaseOxmlElement, parent: ProvidesStoryPart) -> Iterator[str]:
    """The paragraphs and table rows of a body or table cell, in document order, a row as its cells joined by " | "
    (a cell's own tables included)."""
    from docx.table import Table

    for child in _docx_unwrapped(container):
        if child.tag == f"{_W}p":
            yield _docx_paragraph_text(child).strip()
        elif child.tag == f"{_W}tbl":
            for row in Table(child, parent).rows:
                cells = ["\n".join(block for block in _docx_blocks(cell._tc, cell) if block) for cell in row.cells]
                yield " | ".join(cell for cell in cells if cell)


def docx_text(data: bytes) -> str:
    """Paragraphs and tables in document order, with what `Document.paragraphs` leaves out: content controls (cover
    pages, templates, forms), tracked insertions, tables inside table cells. Not read: headers, footers, text boxes,
    footnotes and comments."""
    import docx

    # python-docx raises KeyError, XML and zip errors on damaged files, and ValueError reading a table whose merged
    # cells do not add up (which Word itself opens): all of them mean a file that cannot be read.
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = list(_docx_blocks(document.element.body, document._body))
    except Exception as exc:
        raise DocumentParseError(f"The Word document is damaged and cannot be read ({type(exc).__name__}).") from exc
    return "\n\n".join(block for block in blocks if block)


def document_parse(data: bytes, *, filename: str = "", max_bytes: int) -> ParsedDocument:
    """The text of an uploaded file. Raises DocumentParseError for oversize, empty, binary, encrypted, damaged
    or unsupported files."""
    file_size_check(size_bytes=len(data), max_bytes=max_bytes)
    if not data.strip():
        raise DocumentParseError("The file is empty.")
    kind = file_kind_detect(data, filename)
    if kind == FileKind.PDF:
        text = pdf_text(data)
    elif kind == FileKind.DOCX:
        text = docx_text(data)
    elif kind == FileKind.HTML:
        text = html_text(text_decode(data))
    else:
        text = text_decode(data)
    text = text_storable(text).strip()
    if not text:
        raise DocumentParseError("The document contains no text.")
    return ParsedDocument(kind=kind, text=text)
