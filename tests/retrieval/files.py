"""Test documents built in memory: no binary fixtures in the repository."""

from __future__ import annotations

import io
import zipfile


def _pdf_of(objects: list[str]) -> bytes:
    """A PDF file of the numbered `objects` (object 1 the catalog), its cross-reference offsets computed."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1"))
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def pdf_bytes(lines: list[str]) -> bytes:
    """A one-page PDF with `lines` as real text (Helvetica), xref offsets computed."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    stream = "BT /F1 11 Tf 50 780 Td 14 TL " + " ".join(f"({escape(line)}) '" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 4 0 R >> >> "
        "/Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\nendstream",
    ]
    return _pdf_of(objects)


def encrypted_pdf_bytes(
    lines: list[str], password: str = "s3cret", *, owner_password: str | None = None, algorithm: str | None = None
) -> bytes:
    """A PDF encrypted with `algorithm` (pypdf's default, RC4, when None) that opens with the user `password` ("" for
    one restricted by an owner password alone, which every viewer opens without asking)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(pdf_bytes(lines))).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=owner_password or password, algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def image_only_pdf_bytes() -> bytes:
    return pdf_bytes([])


def docx_bytes(paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    import docx

    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, values in zip(grid.rows, table, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def corrupt_docx_bytes() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<not-xml")
        archive.writestr("word/document.xml", "<w:document><broken")
    return out.getvalue()


def zip_bytes() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes.txt", "hello")
    return out.getvalue()


CORRUPT_PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\n\x00\x13garbage without xref or pages\n"
BINARY = bytes(range(256)) * 40
OLE2_ENCRYPTED_OFFICE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 2000


def docx_with_orphan_merge_bytes(paragraphs: list[str]) -> bytes:
    """A DOCX whose table's first cell continues a vertical merge from a row above it that does not exist: Word
    opens it, python-docx raises ValueError when it reads the table."""
    import docx
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    table = document.add_table(rows=2, cols=2)
    table.cell(1, 1).text = "cell"
    merge = OxmlElement("w:vMerge")
    merge.set(qn("w:val"), "continue")
    table._tbl.tr_lst[0].tc_lst[0].get_or_add_tcPr().append(merge)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pdf_with_glyph_mapped_to_bytes(unicode_hex: str, words: str = "Hello ABBA world") -> bytes:
    """A one-page PDF whose font's ToUnicode map sends the glyph "A" to `unicode_hex` (UTF-16BE, as the map writes it):
    "D835" is a lone high surrogate, as a damaged or hand-written map gives, which pypdf passes through as it is."""
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Glyphs def\n"
        "1 begincodespacerange <00> <FF> endcodespacerange\n"
        f"2 beginbfchar <41> <{unicode_hex}> <42> <0042> endbfchar\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end"
    )
    stream = f"BT /F1 11 Tf 50 780 Td ({words}) Tj ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 4 0 R >> >> "
        "/Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        f"<< /Length {len(cmap)} >>\nstream\n{cmap}\nendstream",
    ]
    return _pdf_of(objects)


def docx_with_hidden_structures_bytes() -> bytes:
    """A DOCX whose text sits where Word puts it but `Document.paragraphs` does not look: a block content control (cover
    pages, templates), an inline one (forms), a tracked insertion beside a tracked deletion, a table inside a table's
    cell, and a table between two paragraphs."""
    import docx
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    w = nsdecls("w")
    document = docx.Document()
    body = document.element.body
    body.insert(
        0,
        parse_xml(
            f"<w:sdt {w}><w:sdtContent><w:p><w:r><w:t>Cover title in a content control</w:t></w:r></w:p>"
            "</w:sdtContent></w:sdt>"
        ),
    )
    document.add_paragraph("Intro before the table.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "outer cell"
    table.cell(0, 1).paragraphs[0]._p.getparent().remove(table.cell(0, 1).paragraphs[0]._p)
    table.cell(0, 1).add_table(rows=1, cols=1).cell(0, 0).text = "nested table text"
    table.cell(0, 1)._tc.append(parse_xml(f"<w:p {w}/>"))  # a cell ends with a paragraph
    paragraph = document.add_paragraph("Name: ")
    paragraph._p.append(
        parse_xml(f"<w:sdt {w}><w:sdtContent><w:r><w:t>Ada Lovelace</w:t></w:r></w:sdtContent></w:sdt>")
    )
    revised = document.add_paragraph("The fee is ")
    revised._p.append(
        parse_xml(
            f'<w:del {w} w:id="1" w:author="a" w:date="2024-01-01T00:00:00Z">'
            "<w:r><w:delText>10</w:delText></w:r></w:del>"
        )
    )
    revised._p.append(
        parse_xml(f'<w:ins {w} w:id="2" w:author="a" w:date="2024-01-01T00:00:00Z"><w:r><w:t>20</w:t></w:r></w:ins>')
    )
    revised.add_run(" EUR per month.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
