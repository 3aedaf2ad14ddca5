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


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_a_pdf_restricted_by_an_owner_password_alone_is_read_whatever_its_cipher(algorithm):
    """Every viewer opens such a PDF (print or copy restrictions, most "secured" PDFs, AES since Acrobat 7) without a
    password. pypdf needs `cryptography` for AES; without it such a PDF was refused as "damaged"."""
    data = files.encrypted_pdf_bytes(["Restricted but readable."], "", owner_password="owner", algorithm=algorithm)
    assert document_parse(data, filename="statement.pdf", max_bytes=LIMIT).text == "Restricted but readable."


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_a_pdf_that_needs_a_password_to_open_is_refused_as_password_protected_whatever_its_cipher(algorithm):
    data = files.encrypted_pdf_bytes(["secret text"], "user-secret", owner_password="owner", algorithm=algorithm)
    with pytest.raises(DocumentParseError, match="The PDF is password-protected"):
        document_parse(data, filename="secret.pdf", max_bytes=LIMIT)


def test_oversize_file_is_refused_with_both_sizes():
    with pytest.raises(DocumentParseError) as error:
        document_parse(b"a" * (3 * 1024 * 1024), max_bytes=2 * 1024 * 1024)
    assert "3.0 MB" in str(error.value) and "2.0 MB" in str(error.value)


# Text that is not UTF-8, in the code page its language is usually saved in outside UTF-8. charset-normalizer alone read
# the first seven in Baltic, Central European or Turkish letters ("crème" as "crčme", "informação" as "informaçăo"): the
# document was indexed and shown garbled, with nothing to say so. The rest must stay as they were read before.
LEGACY_TEXTS = [
    (
        "fr",
        "cp1252",
        "Le café crème et la crème brûlée sont déjà prêts. Où est la forêt? Noël à l'hôtel, très élégant.",
    ),
    ("pt", "cp1252", "A informação está disponível em português. Não há ação sem reação. São Paulo é grande."),
    ("sv", "cp1252", "Även om vädret är dåligt så går vi ut på ön. Här är många människor."),
    ("en", "cp1252", "An English note on the naïve approach to résumé writing, with “quotes” — and dashes…"),
    ("is", "cp1252", "Kæmi ný öxi hér, ykist þjófum nú bæði víl og ádrepa."),
    ("da", "cp1252", "Høj bly gom vandt fræk sexquiz på wc. Blåbærsyltetøj."),
    ("fr-latin-1", "latin-1", "Café"),
    ("es", "cp1252", "El niño comió mañana en la montaña. ¿Qué pasó? Árbol, corazón, canción."),
    ("de", "cp1252", "Die Größe der Straße ist überall gleich. Müller aß Äpfel und Öl."),
    ("it", "cp1252", "Perché la città è così bella? Più caffè, però non è facile."),
    ("pl", "cp1250", "Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig. Ćma leci nad łąką."),
    ("cs", "cp1250", "Příliš žluťoučký kůň úpěl ďábelské ódy. Čeština je krásný jazyk."),
    ("ru", "cp1251", "Съешь же ещё этих мягких французских булок, да выпей чаю. Москва большая."),
    ("el", "cp1253", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Η Ελλάδα είναι όμορφη χώρα."),
    ("ja", "shift_jis", "日本語のテキストです。これはテストの文書です。東京は大きな都市です。"),
    ("zh", "gb18030", "这是一个中文文档。我们正在测试编码检测。北京是中国的首都。"),
]


# One-line files as Notepad or Excel saves them on a Chinese (GBK) or Taiwanese (Big5) Windows: charset-normalizer
# read each of the Chinese ones as another East Asian encoding ("发票什么时候开？" as "랙튿痂척珂빅역？"), and the
# document was indexed and shown so. The Korean and Japanese ones were read right, and must stay so.
SHORT_LEGACY_TEXTS = [
    ("zh-gbk", "gbk", "发票什么时候开？"),
    ("zh-gbk-password", "gbk", "怎么重置密码"),
    ("zh-gbk-refund", "gbk", "如何申请退款？"),
    ("zh-gbk-arrive", "gbk", "退款多久能到账"),
    ("zh-big5", "cp950", "發票什麼時候開？"),
    ("zh-big5-password", "cp950", "怎麼重設密碼"),
    ("zh-big5-refund", "cp950", "如何申請退款？"),
    ("ko-password", "euc_kr", "비밀번호를 어떻게 재설정하나요?"),
    ("ko-refund", "euc_kr", "환불은 언제 되나요?"),
    ("ja-password", "shift_jis", "パスワードをリセットする方法"),
    ("ja-refund", "shift_jis", "返金はいつですか？"),
]


# Short files in a single-byte code page, each of which the decoder read as another before it weighed how each reading
# looks (`kbplatform.script_letters`): Czech and Polish in Windows-1250 came out in Windows-1252 letters ("omáèka"),
# Russian in KOI8-R as half-width katakana, a heading in Windows-1251 capitals as Hangul, Greek in ISO 8859-7 with "¶"
# for "Ά", Hebrew as Cyrillic.
SHORT_SINGLE_BYTE_TEXTS = [
    ("cs", "cp1250", "Zpětný dotaz: omáčka není hotová."),
    ("cs-short", "cp1250", "Císařský řez a děvče."),
    ("pl", "cp1250", "Jak zmienić hasło do konta?"),
    ("ru-koi8", "koi8_r", "Возможно, низкий уровень сигнала."),
    ("ru-koi8-question", "koi8_r", "Как сбросить пароль?"),
    ("ru-heading", "cp1251", "ИНСТРУКЦИЯ ПО ЭКСПЛУАТАЦИИ"),
    ("uk-heading", "cp1251", "ЯК ЗМІНИТИ ПАРОЛЬ?"),
    ("el-iso", "iso8859_7", "Άρθρο για την επιστροφή χρημάτων."),
    ("he", "cp1255", "איך לאפס את הסיסמה?"),
]
LEGACY_CASES = LEGACY_TEXTS + SHORT_LEGACY_TEXTS + SHORT_SINGLE_BYTE_TEXTS


@pytest.mark.parametrize(
    ("text", "encoding"),
    [(text, encoding) for _, encoding, text in LEGACY_CASES],
    ids=[name for name, _, _ in LEGACY_CASES],
)
@pytest.mark.parametrize("repeats", [1, 4])
def test_text_in_a_legacy_code_page_is_read_as_written(text, encoding, repeats):
    written = " ".join([text] * repeats)
    assert document_parse(written.encode(encoding), filename="notes.txt", max_bytes=LIMIT).text == written


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read(encoding):
    text = "Café crème. Zażółć gęślą jaźń. 日本語のテキスト."
    data = text.encode(encoding)
    if encoding in ("utf-16-le", "utf-16-be"):
        data = ("\ufeff" + text).encode(encoding)
    assert document_parse(data, filename="notes.txt", max_bytes=LIMIT).text == text


def test_a_pdf_glyph_mapped_to_a_lone_surrogate_is_read_as_a_replacement_character():
    """pypdf passes a ToUnicode entry that is half a UTF-16 pair through as a lone surrogate, which no tokenizer,
    database or JSON encoder takes: the whole document failed on one glyph."""
    parsed = document_parse(files.pdf_with_glyph_mapped_to_bytes("D835"), filename="math.pdf", max_bytes=LIMIT)
    assert parsed.text == "Hello \ufffdBB\ufffd world"
    parsed.text.encode("utf-8")


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize(
    "text", ["Plain ASCII notes, saved as Unicode by a Windows tool.", "Café crème. Zażółć gęślą jaźń. Grüße."]
)
def test_utf16_without_a_byte_order_mark_is_read_not_called_binary(encoding, text):
    """Its NULs in every other byte made it "binary (not text, PDF or DOCX)": a person told that about a text file
    has nothing to go on."""
    assert document_parse(text.encode(encoding), filename="notes.txt", max_bytes=LIMIT).text == text


def test_binary_with_a_nul_in_every_other_byte_is_still_binary():
    samples = bytes(value for index in range(4000) for value in (index % 32, 0))  # 16-bit integers below 32
    with pytest.raises(DocumentParseError, match="The file is binary"):
        document_parse(samples, filename="samples.txt", max_bytes=LIMIT)


def test_docx_text_in_content_controls_tracked_insertions_and_nested_tables_is_read_in_order():
    """python-docx's `Document.paragraphs` skips content controls and tracked insertions, a cell's `text` skips the
    table inside it, and tables were appended after every paragraph: such text was silently not indexed, or cut off
    from the heading above it."""
    parsed = document_parse(files.docx_with_hidden_structures_bytes(), filename="contract.docx", max_bytes=LIMIT)
    assert parsed.text == (
        "Cover title in a content control\n\nIntro before the table.\n\nouter cell | nested table text\n\n"
        "Name: Ada Lovelace\n\nThe fee is 20 EUR per month."
    )
