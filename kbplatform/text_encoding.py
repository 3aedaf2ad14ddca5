"""Bytes of text in an unknown encoding as text: what an uploaded document or import file holds when it was not saved
as UTF-8 (Excel's CSV in the system's code page, GBK on a Chinese Windows; Notepad's "Unicode", UTF-16). Used by every
upload that takes text files, so that one file reads the same whichever endpoint it is sent to."""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Sequence

from charset_normalizer import CharsetMatch, from_bytes
from charset_normalizer.utils import is_multi_byte_encoding

from kbplatform import chinese_script
from kbplatform.script_letters import JUDGED_CHARACTERS, reading_oddities


class UnreadableTextError(ValueError):
    """The bytes are text in no encoding this reads; the message is meant for the person who sent the file."""


def utf16_without_bom(head: bytes) -> str | None:
    """The codec of UTF-16 text written without a byte-order mark (as some Windows tools save "Unicode" text), or None.

    Text of mostly Latin, Greek or Cyrillic script has a NUL in (nearly) every other byte, on one side only; binary
    can too (an array of small 16-bit numbers), so the start must also decode strictly to printable text."""
    head = head[: len(head) - len(head) % 2]
    pairs = len(head) // 2
    if pairs < 4 or head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None
    even_nuls, odd_nuls = head[0::2].count(0), head[1::2].count(0)
    if odd_nuls >= pairs / 2 and even_nuls == 0:
        codec = "utf-16-le"
    elif even_nuls >= pairs / 2 and odd_nuls == 0:
        codec = "utf-16-be"
    else:
        return None
    try:
        start = head.decode(codec)
    except UnicodeDecodeError:  # a surrogate pair cut at the end of the head is no proof either way
        start = head[:-2].decode(codec, "replace")
    printable = sum(char.isprintable() or char in "\t\n\r" for char in start)
    return codec if printable >= 0.95 * len(start) else None


# Windows-1252, the superset of ISO-8859-1 ("Latin-1") that most text not in UTF-8 is written in (Western European
# languages, saved on Windows).
WESTERN_CODE_PAGE = "cp1252"
# How much worse than charset-normalizer's guess Windows-1252 may read a text and still be taken instead: its mess
# ("chaos", 0 to 1, of which it keeps candidates up to 0.2) and its fit with a language's letter frequencies.
_WESTERN_CHAOS_MARGIN = 0.2
_WESTERN_COHERENCE_MARGIN = 0.05


def text_decode(data: bytes) -> str:
    """Text in UTF-16 without a byte-order mark, in UTF-8 (with or without one) or, failing those, the encoding
    charset-normalizer finds (UTF-16 and UTF-32 by their mark), except that Chinese in GB 18030 (GBK, GB 2312) or Big5
    wins when it reads the bytes as Chinese words and the guess does not (`chinese_reading`), Windows-1252 is put first
    when it reads the bytes about as well as the guess, and then the reading least like a misread code page wins
    (`least_odd_reading`).

    Single-byte code pages cannot be told apart by their bytes alone, and charset-normalizer breaks a near tie between
    them by its own order, not by how common they are: French, Portuguese, Swedish or English in Latin-1 came out in
    Baltic or Central European letters ("crème" as "crčme"), and a short one as UTF-16. Of two readings that look
    equally like written text (Polish "budzić" in Windows-1250 and "budziæ" in Windows-1252), the one put first
    stands: UTF-8 is the way to be sure."""
    bomless_utf16 = utf16_without_bom(data[:8192])
    if bomless_utf16 is not None:  # before UTF-8, which reads its ASCII as letters and NULs
        try:
            return data.decode(bomless_utf16)
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    matches = from_bytes(data)
    best = matches.best()
    chinese = chinese_reading(data, guessed=None if best is None else str(best))
    if chinese is not None:
        return chinese
    if best is None:
        raise UnreadableTextError("The file is not readable text in any known encoding. Save it as UTF-8.")
    if best.bom:  # a byte-order mark names the encoding
        return str(best)
    preferred = best
    guessed_single_byte = not is_multi_byte_encoding(best.encoding) or best.encoding.startswith(("utf_16", "utf_32"))
    if guessed_single_byte:
        for match in matches:
            if (
                WESTERN_CODE_PAGE in match.could_be_from_charset
                and match.chaos <= best.chaos + _WESTERN_CHAOS_MARGIN
                and match.coherence >= best.coherence - _WESTERN_COHERENCE_MARGIN
            ):
                preferred = match  # the same text as Windows-1252 gives: charset-normalizer groups identical readings
                break
    return least_odd_reading(data, [preferred, *(match for match in matches if match is not preferred)])


# The code pages text not in UTF-8 is most often written in: Windows' for Western, Central European, Cyrillic, Greek,
# Turkish, Hebrew, Arabic, Baltic and Thai text, KOI8 (Russian, Ukrainian on Unix) and ISO 8859-7 (Greek on Unix).
# Each reads any byte string, or nearly, so each is a reading of every file.
COMMON_CODE_PAGES = (
    "cp1252",
    "cp1250",
    "cp1251",
    "koi8_r",
    "koi8_u",
    "cp1253",
    "iso8859_7",
    "cp1254",
    "cp1255",
    "cp1256",
    "cp1257",
    "cp874",
)
# The East Asian encodings in common use (GB 18030 and Big5 are read by `chinese_reading` too).
_COMMON_EAST_ASIAN = ("shift_jis", "cp932", "euc_jp", "euc_kr", "cp949", "gb18030", "gbk", "gb2312", "big5", "cp950")
_COMMON = frozenset(COMMON_CODE_PAGES + _COMMON_EAST_ASIAN + ("latin_1", "iso8859_15", "iso8859_2", "utf_16", "utf_32"))


def _is_common(reading: CharsetMatch | str) -> bool:
    encodings = [reading] if isinstance(reading, str) else reading.could_be_from_charset
    return any(encoding in _COMMON for encoding in encodings)


def least_odd_reading(data: bytes, matches: Sequence[CharsetMatch]) -> str:
    """`data` as the reading with the fewest oddities (`script_letters.reading_oddities`) among charset-normalizer's
    `matches`, in the order given, and `COMMON_CODE_PAGES` after them; of equals, one a common encoding gives
    (`_COMMON`: not a Mac or DOS code page) before the others, then the earlier. So the guess stands unless another
    reading is plainly more like written text: charset-normalizer weighs letter frequencies, which on a short text are
    noise ("Příliš" in Windows-1250 and "Pøíliš" in Windows-1252 tied, and Russian in Windows-1251 came out in Mac
    Cyrillic, "Лететь" as "Ћететь"), and keeps only the readings it rates (KOI8-R Russian came out as half-width
    katakana, the only one it kept)."""
    guess = str(matches[0])
    guess_oddities = reading_oddities(guess)
    if guess_oddities == 0 and _is_common(matches[0]):
        return guess  # nothing to improve on
    seen = {encoding for match in matches for encoding in match.could_be_from_charset}
    others = [*matches[1:], *(encoding for encoding in COMMON_CODE_PAGES if encoding not in seen)]
    readings: list[tuple[int, CharsetMatch | str]] = [(guess_oddities, matches[0])]
    for reading in others:  # judged on their start: a match is the whole file once made a string
        start = _start_read(
            data, reading if isinstance(reading, str) else reading.encoding, characters=JUDGED_CHARACTERS
        )
        if start is not None:
            readings.append((reading_oddities(start), reading))
    # Stable: equals keep their order.
    for _, reading in sorted(readings, key=lambda reading: (reading[0], not _is_common(reading[1]))):
        if not isinstance(reading, str):
            return str(reading)
        try:
            return data.decode(reading)
        except UnicodeDecodeError:  # its start reads in it, the rest does not
            continue
    return guess


# The encodings Chinese text not in UTF-8 is written in: GB 18030, the superset of GBK and GB 2312 (mainland China,
# Windows' "ANSI" there), and Windows' Big5 (Taiwan, Hong Kong).
CHINESE_ENCODINGS = ("gb18030", "cp950")
# A reading is Chinese text when at least this share of its neighbouring characters begin or are a dictionary word
# (`chinese_script.dictionary_pair_share`): the 1% quantile of the shared sets' questions, above what bytes of another
# encoding read as Chinese make (docs/ingestion.md, "Encodings: short Chinese files").
CHINESE_PAIR_SHARE = 0.2
# Letters beyond ASCII other than Chinese characters (kana, Hangul, Latin with accents) a Chinese reading may hold.
_OTHER_LETTERS_ALLOWED = 0.1
# A reading is judged on its first characters, read from the start of the file: the encoding shows there, and reading
# a 50 MB upload whole in two more encodings would cost its size in memory twice over.
_JUDGED_CHARACTERS = 20_000


def _chinese_share(text: str) -> float | None:
    """`chinese_script.dictionary_pair_share` of the start of `text` (`_JUDGED_CHARACTERS`) when its letters beyond
    ASCII are Chinese characters (full-width Latin letters, which Chinese text types, and a few others aside), else
    None: Japanese in EUC-JP read as GB 2312 keeps its kana, and is no Chinese."""
    start = text[:_JUDGED_CHARACTERS]
    letters = other = 0
    for char in start:
        if char.isascii() or unicodedata.category(char)[0] != "L" or "\uff01" <= char <= "\uff5e":
            continue
        letters += 1
        other += not chinese_script.is_han(char)
    if not letters or other > _OTHER_LETTERS_ALLOWED * letters:
        return None
    return chinese_script.dictionary_pair_share(start)


def _start_read(data: bytes, encoding: str, *, characters: int = _JUDGED_CHARACTERS) -> str | None:
    """The start of `data` (the bytes of `characters` characters at most, at 4 bytes a character) read in `encoding`,
    a character the cut splits left out; None when those bytes are not text in it."""
    judged = 4 * characters
    try:
        return codecs.getincrementaldecoder(encoding)().decode(data[:judged], final=len(data) <= judged)
    except UnicodeDecodeError:
        return None


def chinese_reading(data: bytes, *, guessed: str | None) -> str | None:
    """`data` read as Chinese in the encoding of `CHINESE_ENCODINGS` whose reading is most of dictionary words, when
    that reading is Chinese text (`CHINESE_PAIR_SHARE`) and reads more of them than `guessed` (charset-normalizer's
    reading, None when it found none); else None.

    GB 2312, Big5, KS X 1001 and the Japanese encodings share their byte ranges, and on a short text charset-normalizer
    takes one for another as often as not: a one-line question saved in GBK or Big5 came out as rare Hangul and Hanja,
    Thai letters or a BOM-less UTF-16 mess. Read as Chinese, such bytes make words; Korean, Japanese or Western text
    read as Chinese makes characters side by side by accident, which no dictionary has."""
    chosen, chosen_share = None, CHINESE_PAIR_SHARE
    for encoding in CHINESE_ENCODINGS:
        start = _start_read(data, encoding)
        share = None if start is None else _chinese_share(start)
        if share is not None and share >= chosen_share and (chosen is None or share > chosen_share):
            chosen, chosen_share = encoding, share
    if chosen is None:
        return None
    try:
        text = data.decode(chosen)
    except UnicodeDecodeError:  # its start reads in it, the rest does not
        return None
    if text == guessed:
        return None
    guessed_share = None if guessed is None else _chinese_share(guessed)
    return None if guessed_share is not None and guessed_share >= chosen_share else text
