import pytest

from retrieval.parsing import DocumentParseError, FileKind, document_parse, file_kind_detect
from tests.retrieval import files

LIMIT = 1024 * 1024


def test_pdf_text_is_extracted():
    data = files.pdf_bytes(["Photosynthesis turns light into sugar.", "Second line."])
    parsed = document_parse(data, max_bytes=LIMIT)
    assert parsed.kind == FileKind.PDF
    assert "Photosynthesis turns light into sugar." in parsed.text
    assert "Second line." in parsed.text


def test_docx_paragraphs_and_tables_are_extracted():
    data = files.docx_bytes(["Mitochondria make ATP.", "Ribosomes make proteins."], table=[["organelle", "role"]])
    parsed = document_parse(data, filename="cells.docx", max_bytes=LIMIT)
    assert parsed.kind == FileKind.DOCX
    assert "Mitochondria make ATP." in parsed.text and "Ribosomes make proteins." in parsed.text
    assert "organelle | role" in parsed.text


def test_kind_comes_from_content_not_the_name():
    assert file_kind_detect(files.pdf_bytes(["x"]), "notes.txt") == FileKind.PDF
    assert file_kind_detect(files.docx_bytes(["x"]), "report.pdf") == FileKind.DOCX
    assert file_kind_detect(b"<!DOCTYPE html><html><body>x</body></html>", "page.txt") == FileKind.HTML
    assert file_kind_detect(b"# Title\n\ntext", "readme.md") == FileKind.MARKDOWN
    assert file_kind_detect(b"plain words", "") == FileKind.TEXT


def test_html_keeps_visible_text_only():
    markup = b"<html><head><title>t</title><style>p{}</style></head><body><p>Visible words</p>"
    markup += b"<script>var hidden = 1;</script></body></html>"
    parsed = document_parse(markup, filename="page.html", max_bytes=LIMIT)
    assert parsed.kind == FileKind.HTML
    assert parsed.text == "Visible words"


def test_latin1_text_is_decoded():
    data = "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, d\u00e9j\u00e0 vu.".encode("latin-1") * 5
    parsed = document_parse(data, max_bytes=LIMIT)
    assert "Caf\u00e9" in parsed.text


@pytest.mark.parametrize(
    ("data", "filename", "message"),
    [
        (b"", "empty.txt", "The file is empty."),
        (b"   \n\t ", "blank.txt", "The file is empty."),
        (files.BINARY, "photo.jpg", "The file is binary"),
        (files.CORRUPT_PDF, "broken.pdf", "The PDF is damaged"),
        (files.corrupt_docx_bytes(), "broken.docx", "The Word document is damaged"),
        (files.docx_with_orphan_merge_bytes(["Opens in Word."]), "merged.docx", "The Word document is damaged"),
        (files.zip_bytes(), "archive.zip", "ZIP archive, not a supported document"),
        (files.OLE2_ENCRYPTED_OFFICE, "secret.docx", "password-protected Office document"),
        (files.image_only_pdf_bytes(), "scan.pdf", "no extractable text"),
        (b"<html><body><script>x()</script></body></html>", "empty.html", "contains no text"),
    ],
)
def test_bad_files_raise_a_message_a_person_understands(data, filename, message):
    with pytest.raises(DocumentParseError) as error:
        document_parse(data, filename=filename, max_bytes=LIMIT)
    assert message in str(error.value)


def test_encrypted_pdf_is_refused_with_its_reason():
    with pytest.raises(DocumentParseError, match="password-protected"):
        document_parse(files.encrypted_pdf_bytes(["secret text"]), max_bytes=LIMIT)


def test_oversize_file_is_refused_with_both_sizes():
    with pytest.raises(DocumentParseError) as error:
        document_parse(b"a" * (3 * 1024 * 1024), max_bytes=2 * 1024 * 1024)
    assert "3.0 MB" in str(error.value) and "2.0 MB" in str(error.value)
