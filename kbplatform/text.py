"""Checks of the free text a client sends (questions, end-user ids), and text made storable: pure functions, no I/O.

Control characters (C0/C1 but tab, newline and carriage return) are never part of text a person typed: they come
from a client bug (a stray escape sequence, a binary id) and would be embedded, stored and shown in the admin as
they are. Text made only of spaces, control and formatting characters (zero-width spaces, byte-order marks) reads
as empty to a person, however long it is. Text nobody typed and nobody can be asked to fix (a parsed file, the
answer service's reply) is not refused but made storable (`text_storable`).
"""

from __future__ import annotations

import re
import unicodedata

ALLOWED_CONTROL_CHARACTERS = frozenset("\t\n\r")
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def control_character_problem(value: str) -> str | None:
    """What is wrong with `value` if it holds a control character or a lone surrogate (the first one, named and
    placed), else None. A lone surrogate comes only from JSON text the body parser did not read (a form field, a
    JSONL line): no UTF-8 can store it, so it would fail at the database, the tokenizer or the response."""
    for position, character in enumerate(value, start=1):
        category = unicodedata.category(character)
        if category == "Cs":
            return (
                f"Contains a lone surrogate U+{ord(character):04X} at position {position}, which is not text; send "
                "valid UTF-8."
            )
        if category == "Cc" and character not in ALLOWED_CONTROL_CHARACTERS:
            return (
                f"Contains the control character U+{ord(character):04X} at position {position}; "
                "send text without control characters (tab, newline and carriage return are fine)."
            )
    return None


def has_visible_character(value: str) -> bool:
    """Whether `value` holds anything but spaces, control and formatting characters."""
    return any(unicodedata.category(character) not in _INVISIBLE_CATEGORIES for character in value)


def user_id_canonical(value: str) -> str:
    """The one spelling of an end-user id: Unicode NFC, so that "é" typed as one character and as "e" plus a combining
    accent names one user, whose conversations, user-scope stored answers and audit trail are then one."""
    return unicodedata.normalize("NFC", value)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds half a UTF-16 surrogate pair, which no UTF-8 (PostgreSQL, the tokenizer, JSON) can hold."""
    return _LONE_SURROGATE.search(text) is not None


def text_storable(text: str) -> str:
    """`text` as PostgreSQL, the tokenizer and JSON can hold it: NUL dropped, and a lone UTF-16 surrogate replaced by
    U+FFFD. For text no person typed and nobody can be asked to fix: a parsed file (pypdf gives a surrogate for a
    glyph a PDF's ToUnicode map sends to half a pair, so one such glyph costs its character, not the whole document)
    and the answer service's reply."""
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", ""))


# The full-width forms of the ASCII digits and letters ("１２３", "ＡＰＩ"), which East Asian input methods type in
# full-width mode, each to its ASCII twin. Full-width punctuation is left: Chinese text writes "，" and "？" in every
# sentence, and the bundled model's vocabulary holds them as they are.
_FULL_WIDTH_TO_ASCII = str.maketrans(
    {chr(code): chr(code - 0xFEE0) for code in [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}
)


def width_folded(text: str) -> str:
    """`text` with each full-width digit and letter as its ASCII twin: "ＡＰＩ key" is "API key". One character for
    one, so an offset into the result is the same offset into `text`; every other character is kept as it is."""
    return text.translate(_FULL_WIDTH_TO_ASCII)


def _vowel_signs_as_letters() -> dict[int, str]:
    """The Brahmic scripts of India from Devanagari to Malayalam are laid out alike: the dependent vowel sign at offset
    0x3E-0x4C of a block is the vowel written as a letter at offset 0x06-0x14 of the same block ("ि" U+093F is "इ"
    U+0907). Each sign that is a mark, to that letter where it is one."""
    table = {}
    for block in range(0x0900, 0x0D80, 0x80):
        for offset in range(0x3E, 0x4D):
            sign, letter = chr(block + offset), chr(block + offset - 0x38)
            if unicodedata.category(sign).startswith("M") and unicodedata.category(letter) == "Lo":
                table[ord(sign)] = letter
    return table


_VOWEL_SIGN_LETTERS = _vowel_signs_as_letters()


def marks_as_letters(text: str) -> str:
    """`text` with no combining mark left: composed where Unicode composes (NFC: "e" and a combining acute are "é",
    kana and their voicing marks, Hangul jamo); a vowel sign of the scripts of India as its vowel letter ("कि" is
    "कइ", so "किस" and "कैसे" stay two words); every other mark left out (Thai vowels and tones above and below the
    line, Arabic and Hebrew vowel points, which most text leaves out anyway, a virama, a nukta). For a BM25 field whose
    tokenizer takes a run of letters as a word and a mark as no letter (Milvus Lite's `\\w+`): "हिन्दी" was three
    one-letter words and a Thai word fell apart at each vowel above or below it. Read so, a word of these scripts
    stays one word, written with letters only."""
    text = unicodedata.normalize("NFC", text)
    if text.isascii():
        return text
    return "".join(
        _VOWEL_SIGN_LETTERS.get(ord(character), "") if unicodedata.category(character).startswith("M") else character
        for character in text
    )


# Letters of the scripts written without a space between words (Han, kana, Thai, Lao) or with the grammar joined to
# the word (Hangul: "비밀번호를", "password" + object particle): Thai and Lao letters but their digits (their marks
# are gone: `marks_as_letters`), the iteration and zero marks 々 〆 〇, hiragana, katakana with its phonetic
# extensions and half-width forms, the CJK ideographs of the BMP and beyond, and the Hangul syllables.
_UNSPACED_RUN = re.compile(
    "[\u0e01-\u0e4f\u0e81-\u0ecf\u0edc-\u0edf"
    "\u3005-\u3007\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uac00-\ud7a3\uff66-\uff9f\U00020000-\U0003134f]+"
)
_HALF_WIDTH_KANA = re.compile("[\uff66-\uff9f]")
_HIRAGANA_ONLY = re.compile("[\u3041-\u309f]+")


def unspaced_runs_paired(text: str) -> str:
    """`text` with every run of Han, kana, Hangul, Thai or Lao letters written as its overlapping pairs of letters,
    each a word between spaces ("パスワードを忘れた" is "パス スワ ワー ード ドを を忘 忘れ"); a run of one or two
    letters is one word. Every other character is kept as it is. For a BM25 field whose tokenizer cuts words at spaces
    and punctuation: it reads a run of these scripts, often a whole clause, as one word, which a question matches only
    if it holds the same clause. Pairs need no dictionary and match where the words do (the question's "パスワード"
    meets the page's "パスワードを"; the Korean "비밀번호는" meets "비밀번호를" on three pairs of four), for
    Japanese, Korean, Chinese and Thai alike. A pair of two hiragana is left out: it is Japanese grammar (particles and
    endings: "ます", "すか", "して"), which every question and page share as English ones share "the", and which
    outweighed a question's words in the titles of a help centre (so a text written in hiragana alone holds no word
    here; its vectors still find it). Half-width katakana are read as their full-width letters (NFKC), as an input
    method's other width. Thai and Lao are paired as `marks_as_letters` leaves them, without their vowel and tone
    marks."""
    return _UNSPACED_RUN.sub(_run_paired, text)


def _run_paired(match: re.Match) -> str:
    run = match.group()
    if _HALF_WIDTH_KANA.search(run):
        run = unicodedata.normalize("NFKC", run)
    pairs = [run] if len(run) <= 2 else [run[index : index + 2] for index in range(len(run) - 1)]
    paired = " ".join(pair for pair in pairs if not _HIRAGANA_ONLY.fullmatch(pair))
    text, start, end = match.string, match.start(), match.end()
    before = " " if start > 0 and not text[start - 1].isspace() else ""
    after = " " if end < len(text) and not text[end].isspace() else ""
    return before + paired + after
