"""What a reading of bytes in a single-byte code page looks like when it is the wrong one, told from the letters
alone: `reading_oddities` counts what text as people write it does not hold. Pure functions, no I/O.

The bytes of one code page are letters of another (Czech "ř" in Windows-1250 is "ø" in Windows-1252, Greek "ώ" in
Windows-1253 is "ю" in Windows-1251), so every reading is text of some kind. A wrong one still gives itself away:
  - a symbol inside a word ("kszta³cie", "St³ck": Polish "ł" and German "ü" read in other code pages);
  - a capital after a small letter inside a word ("дйплйуиЮуейт": Greek accented letters read as Cyrillic capitals);
  - two alphabets inside a word, a lone Chinese character against Latin letters ("f黵": German "ü" read as GBK), a
    mark on no letter, or letters no typed text holds (half-width katakana, Arabic presentation forms);
  - letters no one language writes together ("císaøský dìvèe": Czech read as Windows-1252 mixes Danish "ø" with
    Italian "ì" and Czech "ý"): counted against the language of the text's script that holds most of its letters,
    from the alphabets below, which are those of the languages written in single-byte code pages;
  - letters where their spelling never puts them: Hebrew read as Cyrillic ("аъ": ъ after a vowel) or as Greek
    ("ΰικ": a dialytika on a word's first vowel), Greek capitals read as Cyrillic ("РСПВЛЗМБФЙКЗ": a long word
    without a vowel).
It cannot tell apart two readings each of which one language could write (Polish "budzić" and "budziæ", whose
letters Danish has; KOI8-R capitals and Windows-1251 small letters): those stay the guess's call.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Each language's letters beyond ASCII, in lower case, by script. A reading's letters of a script are counted against
# the one language of that script that holds most of them. Letters a language writes in loanwords alone are left out
# (French "æ", Italian "í" and "ú"): kept, French would pass Polish read as Windows-1252 ("opuœciæ"), and Italian
# Czech ("zmìníte").
_LATIN_ALPHABETS = {
    "af": "áéèêëíîïóôúû",
    "az": "çəğıöşü",
    "ca": "àçéèíïòóúü",
    "cs": "áčďéěíňóřšťúůýž",
    "da": "æøåé",
    "de": "äöüß",
    "eo": "ĉĝĥĵŝŭ",
    "es": "áéíñóúü",
    "et": "äöõüšž",
    "fi": "åäöšž",
    "fo": "áðíóúýæø",
    "fr": "àâçéèêëîïôœùûüÿ",
    "ga": "áéíóú",
    "hr": "čćđšž",
    "hu": "áéíóöőúüű",
    "is": "áðéíóúýþæö",
    "it": "àèéìîòóù",
    "lt": "ąčęėįšųūž",
    "lv": "āčēģīķļņšūž",
    "mt": "àċèġħìòùż",
    "nl": "áéèëíïóöúü",
    "no": "æøåéèóòâô",
    "pl": "ąćęłńóśźż",
    "pt": "áâãàçéêíóôõú",
    "ro": "ăâîșțşţ",
    "sk": "áäčďéíĺľňóôŕšťúýž",
    "sl": "čćđšž",
    "sq": "çë",
    "sv": "åäöé",
    "tr": "âçğıîöşüû",
    "vi": "àáâãèéêìíòóôõùúýăđĩũơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ",
}
_RUSSIAN = "абвгдеёжзийклмнопрстуфхцчшщъыьэюя"
_CYRILLIC_ALPHABETS = {
    "be": "абвгдеёжзійклмнопрстуўфхцчшыьэюя",
    "bg": "абвгдежзийклмнопрстуфхцчшщъьюяѝ",
    "kk": _RUSSIAN + "әғқңөұүһі",
    "mk": "абвгдѓежзѕијклљмнњопрстќуфхцчџш",
    "ru": _RUSSIAN,
    "sr": "абвгдђежзијклљмнњопрстћуфхцчџш",
    "uk": "абвгґдеєжзиіїйклмнопрстуфхцчшщьюя",
}
_GREEK_ALPHABETS = {"el": "αβγδεζηθικλμνξοπρστυφχψωςάέήίόύώϊϋΐΰ"}
# Letters without one of which a text is not in that language: Vietnamese's alphabet holds most Western accented
# letters, and would otherwise pass any mixture of them ("Èi svobodný", Czech read as Windows-1252) as Vietnamese.
_MARKERS = {"vi": frozenset("ăđơư")}
ALPHABETS = {
    "LATIN": {language: frozenset(letters) for language, letters in _LATIN_ALPHABETS.items()},
    "CYRILLIC": {language: frozenset(letters) for language, letters in _CYRILLIC_ALPHABETS.items()},
    "GREEK": {language: frozenset(letters) for language, letters in _GREEK_ALPHABETS.items()},
}
# The scripts of single-byte code pages: two of them side by side in a word are one code page read as another ("crθme":
# French in Latin-1 read as Greek).
_ALPHABETIC = frozenset({"LATIN", "CYRILLIC", "GREEK", "HEBREW", "ARABIC", "THAI"})
# Scripts whose letters a multi-byte encoding makes of a Latin text's accented ones (`_lone_east_asian_beside_latin`).
_EAST_ASIAN = frozenset({"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA", "HANGUL", "HALFWIDTH"})
# Punctuation and signs that sit against letters in typed text: quotes, dashes, "¿Qué", "25°C", "Word™", "l·l", "n−3".
_TYPOGRAPHIC = frozenset("‘’‚‛“”„‟«»‹›‐‑‒–—―…·•¡¿°®©™−")
# Marks that open a Spanish question or exclamation, and never follow a letter.
_OPENING_MARKS = frozenset("¡¿")
# East Asian punctuation, which sits against letters (。、「」 and the full-width forms), but the white lenticular
# brackets 〖〗: typed text hardly holds them, and GB 2312 reads EUC-JP's long-vowel mark "ー" as 〖.
_EAST_ASIAN_PUNCTUATION = frozenset(chr(code) for code in range(0x3000, 0x3040)) - frozenset("〖〗")
# How much of a reading is looked at: the encoding shows in its first characters.
JUDGED_CHARACTERS = 4_000


@lru_cache(maxsize=8192)
def _letter_script(char: str) -> str:
    """The script a letter is written in, by its Unicode name's first word ("LATIN", "CYRILLIC", "CJK", ...), with
    the letters no typed text holds named apart: "HALFWIDTH" (half-width katakana, a terminal's) and "PRESENTATION"
    (Arabic presentation forms, a font's shapes)."""
    name = unicodedata.name(char, "")
    if "\ufb50" <= char <= "\ufdff" or "\ufe70" <= char <= "\ufeff":
        return "PRESENTATION"
    return name.split(" ", 1)[0] if name else ""


def _is_latin_letter(char: str) -> bool:
    return char.isalpha() and (char.isascii() or _letter_script(char) == "LATIN")


def _between_greek_letters(text: str, index: int) -> bool:
    return 0 < index < len(text) - 1 and all(
        neighbour.isalpha() and _letter_script(neighbour) == "GREEK" for neighbour in (text[index - 1], text[index + 1])
    )


def _is_odd_sign(char: str) -> bool:
    """A character that is neither ASCII, a letter, a mark, a space nor an invisible format character (a zero-width
    space, a soft hyphen), nor one of the signs typed text puts against letters (`_TYPOGRAPHIC`, currency, quotes and
    dashes, East Asian punctuation): against a letter, it stands where a letter of another code page was."""
    if char.isascii() or char in _TYPOGRAPHIC or char in _EAST_ASIAN_PUNCTUATION or "\uff01" <= char <= "\uff65":
        return False
    category = unicodedata.category(char)
    return category[0] not in "LMZ" and category not in ("Cf", "Sc", "Pi", "Pf", "Pd")


def reading_oddities(text: str) -> int:
    """How many things in the start of `text` (`JUDGED_CHARACTERS`) a misread code page makes and written text does
    not (the module's list): odd signs against a letter, marks on no letter, capitals after a small letter in a word
    where either is beyond ASCII, neighbouring letters of two scripts that are not written together, lone East Asian
    letters against Latin ones, half-width katakana and presentation forms, letters of a script that its
    best-fitting language does not write, and Cyrillic and Greek letters where their spelling never puts them. 0 for
    text in ASCII."""
    start = text[:JUDGED_CHARACTERS]
    oddities = 0
    letters_by_script: dict[str, dict[str, int]] = {}
    previous = ""
    for index, char in enumerate(start):
        if char.isascii():
            previous = char if char.isalpha() else ""
            continue
        if not char.isalpha():
            if _is_odd_sign(char) and (previous.isalpha() or (index + 1 < len(start) and start[index + 1].isalpha())):
                oddities += 1
            elif char in _OPENING_MARKS and previous.isalpha():
                oddities += 1  # "mo¿e": Polish "ż" read as Windows-1252; "¿" opens a question, never ends a word
            elif char == "’" and _between_greek_letters(start, index):
                oddities += 1  # "ΡΩΤ’ΕΙ": "Ά" of Windows-1253 read as ISO 8859-7; Greek elides at a word's edge only
            if unicodedata.category(char)[0] == "M":
                oddities += not previous  # a mark is written on a letter, never after a space ("ืละ": Thai read so)
            else:
                previous = ""
            continue
        script = _letter_script(char)
        if script in ("HALFWIDTH", "PRESENTATION"):
            oddities += 1
        if previous:
            if char.isupper() and previous.islower():
                oddities += 1
            previous_script = "LATIN" if previous.isascii() else _letter_script(previous)
            if previous_script != script and {previous_script, script} <= _ALPHABETIC:
                oddities += 1
        if script in ALPHABETS:
            lower = char.lower()
            if len(lower) == 1:
                counts = letters_by_script.setdefault(script, {})
                counts[lower] = counts.get(lower, 0) + 1
        previous = char
    for script, counts in letters_by_script.items():
        written = sum(counts.values())
        best_fit = max(
            sum(n for letter, n in counts.items() if letter in alphabet)
            for language, alphabet in ALPHABETS[script].items()
            if language not in _MARKERS or not _MARKERS[language].isdisjoint(counts)
        )
        oddities += written - best_fit
    return oddities + _lone_east_asian_beside_latin(start) + _cyrillic_misspellings(start) + _greek_misspellings(start)


def _is_east_asian(char: str) -> bool:
    return not char.isascii() and char.isalpha() and _letter_script(char) in _EAST_ASIAN


def _lone_east_asian_beside_latin(text: str) -> int:
    """How many runs of one or two East Asian letters in `text` touch a Latin letter on one side and have ASCII or a
    Latin letter on the other: what a multi-byte encoding makes of an accented letter in Latin text ("f黵 Brief",
    "g幯廨al"). Japanese, Korean or Chinese text holding a Latin word has few ("Windows版 下载", not "用iPhone拍照，");
    the same bytes read in a single-byte code page make far more oddities of other kinds."""
    count = index = 0
    while index < len(text):
        if not _is_east_asian(text[index]):
            index += 1
            continue
        end = index
        while end < len(text) and _is_east_asian(text[end]):
            end += 1
        before = text[index - 1] if index > 0 else ""
        after = text[end] if end < len(text) else ""
        in_latin_text = all(side and (side.isascii() or _is_latin_letter(side)) for side in (before, after))
        count += end - index <= 2 and in_latin_text and (_is_latin_letter(before) or _is_latin_letter(after))
        index = end
    return count


_CYRILLIC_VOWELS = frozenset("аеёиоуыэюяіїєў")
# Where Cyrillic spelling never puts a letter: a word never begins with ь, ъ or ы; ь and ъ follow a consonant; й follows
# a vowel or begins a word. Hebrew read as Windows-1251 breaks these at every other word (ת is ъ, י is й), Russian,
# Ukrainian, Belarusian and Bulgarian as written do not (Serbian and Macedonian have none of these letters).
_SIGNS = frozenset("ьъ")
# A Cyrillic word of five letters or more has a vowel (abbreviations, "СССР", are shorter): Greek capitals read as
# Windows-1251 are consonants for most of their vowels (Α is Б, Ο is П, Ω is Щ).
_LONG_CYRILLIC_WORD = re.compile(r"[\u0400-\u04ff]{5,}")


def _cyrillic_misspellings(text: str) -> int:
    """How many Cyrillic letters of `text` stand where Cyrillic spelling never puts them (`_SIGNS`, й, ы), and how
    many of its Cyrillic words of five letters or more have no vowel."""
    lowered = text.lower()
    count = 0
    previous = ""
    for char in lowered:
        if char in _SIGNS or char == "ы":
            if not previous.isalpha() or (char in _SIGNS and (previous in _CYRILLIC_VOWELS or previous in "ьъй")):
                count += 1
        elif char == "й" and previous.isalpha() and previous not in _CYRILLIC_VOWELS:
            count += 1
        previous = char
    return count + sum(not _CYRILLIC_VOWELS.intersection(word) for word in _LONG_CYRILLIC_WORD.findall(lowered))


_GREEK_VOWELS = frozenset("αεηιουωάέήίόύώϊϋΐΰ")
# Letters Greek spelling puts in one place only: final sigma ς ends a word and σ does not; a vowel with a dialytika
# (ϊ ϋ ΐ ΰ) follows a vowel, as the mark says it is not read with it. Hebrew read as Windows-1253 breaks these (ע is ς,
# א is ΰ), Greek as written does not.
_DIALYTIKA = frozenset("ϊϋΐΰ")


def _greek_misspellings(text: str) -> int:
    """How many Greek letters of `text` stand where Greek spelling never puts them (ς, σ, `_DIALYTIKA`)."""
    count = 0
    for index, char in enumerate(text):
        following = text[index + 1] if index + 1 < len(text) else ""
        if char == "ς":
            count += following.isalpha()
        elif char == "σ":
            count += index > 0 and text[index - 1].isalpha() and not following.isalpha()
        elif char in _DIALYTIKA:
            count += index == 0 or text[index - 1].lower() not in _GREEK_VOWELS
    return count
