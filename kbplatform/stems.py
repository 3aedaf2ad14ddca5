"""Words read as their stems for a BM25 field, by the Snowball project's stemmers (PyStemmer): pure functions, no I/O.

A BM25 field matches a question's words to a page's as strings. Most languages write a word in many forms (case,
number, gender, the verb's person, an article or preposition joined to the word), so a question found a page only where
both wrote the same form. The field and the query are given each word as its stem, the same way on both sides, so any
form finds the others. Milvus's own `stemmer` filter would do it inside the field, but Milvus Lite ignores it, and a
field's filters are fixed when its collection is made: the stems are made here, before the text reaches the field.

Two readings, both only ever applied to the same field on both sides:
- by script, whatever the knowledge base's language: a Cyrillic, Arabic, Devanagari or Greek word by the stemmer of
  its script's most written language (Russian, Arabic, Hindi, Greek); the script says the language well enough, and
  the field's English rules did nothing for these words;
- by the knowledge base's language, for a language written in Latin letters (`LATIN_LANGUAGES`): the script does not
  say which one, so a knowledge base names it (`text_analyzer`). Its words are read in lower case, its function words
  (articles, prepositions, pronouns, conjunctions, the verb "to be" and negation, as the English field's stop list
  holds them) are left out, the rest are stemmed and then written without accents, as users often type them. Serbian,
  written in Cyrillic and in Latin letters, has its Cyrillic words written in Latin letters first in a knowledge base
  that names it, so a page in one alphabet finds a question in the other.
"""

from __future__ import annotations

import re
import threading
import unicodedata

import Stemmer

# A word of the scripts read by script: Cyrillic (Russian), Arabic (its letters, vowel points and the Persian and Urdu
# letters; not its digits or punctuation), Devanagari (Hindi; not the danda or digits) and Greek (monotonic and
# polytonic letters; its question mark and raised dot are punctuation once composed).
_SCRIPT_WORDS = (
    "(?P<russian>[\u0400-\u052f]+)|(?P<arabic>[\u0621-\u065f\u0670-\u06d3\u06fa-\u06ff]+)"
    "|(?P<hindi>[\u0900-\u0963\u0971-\u097f]+)|(?P<greek>[\u0386\u0388-\u03ff\u1f00-\u1ffe]+)"
)
_SCRIPT_WORD = re.compile(_SCRIPT_WORDS)
# A word in Latin letters (Basic Latin, Latin-1 Supplement and Latin Extended-A and -B letters; composed text).
_SCRIPT_OR_LATIN_WORD = re.compile(_SCRIPT_WORDS + "|(?P<latin>[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]+)")

# The function words of each Latin-script language a knowledge base may name, compared without their accents (as a
# word is): what the English field's stop list holds for English, in each language. Written here; kept short, as the
# English one is: a word that can carry the question ("como" is also "I eat") stays, and so do the asking words.
_FUNCTION_WORDS = {
    "spanish": (
        "a al ante con contra de del desde e el en entre es esta estan estoy fue ha han hasta hay he la las le les lo "
        "los me mi mis muy ni no nos o os para pero por que se ser si sin sobre son su sus te tu tus u un una unas "
        "uno unos y ya yo"
    ),
    "french": (
        "a ai au aux avec c ce ces cet cette d dans de des du elle en est et etre il ils j je l la le les leur leurs "
        "lui m ma mais me mes mon n ne ni nous on ont ou par pas pour qu que qui s sa se ses si son sont sur t ta te "
        "tes ton tu un une vos votre vous y"
    ),
    "german": (
        "am an auch auf aus bei bin bis bist da das dass dem den der des die du ein eine einem einen einer eines er "
        "es fur hat ich ihr im in ist mein meine meinen meinem meiner mich mir mit nach nicht oder sich sie sind um "
        "und uns vom von war wir zu zum zur"
    ),
    "portuguese": (
        "a ao aos as com da das de do dos e ela elas ele eles em esta este eu foi fui isso isto ja me meu meus minha "
        "minhas na nao nas no nos o os ou para pela pelo por pra que se sem seu seus sou sua suas te um uma umas uns "
        "voce voces"
    ),
    "italian": (
        "a ad agli ai al all alla alle allo c che chi ci con d da dai dal dall dalla degli dei del dell della delle "
        "dello di e ed era gli ha hanno ho i il in io l la le lo ma me mi mia mie miei mio ne negli nei nel nell nella "
        "nelle non o per se si sono su sua sue sui sul sull sulla suo suoi ti tu un una uno"
    ),
    "dutch": (
        "aan al als bij dan dat de den der deze die dit door een en er heb heeft het hij hem hun ik in is je jij jou "
        "jouw maar me met mij mijn na naar niet nog of om ons onze op over te tot u uit van voor was we wij worden "
        "wordt ze zij zich zijn zo"
    ),
    "turkish": (
        "ama ben benim bir biz bu cok da daha de degil en gibi icin ile ki mi mı mu o onlar sen siz su ve veya ya"
    ),
    "indonesian": (
        "adalah akan aku anda atau belum bukan dan dari dengan di dia ga gak ia ini itu juga jika kalau kami kamu "
        "karena ke kita mereka nggak oleh pada saya sudah tak tapi tetapi tidak udah untuk yang"
    ),
    "swedish": (
        "av de den det din dina dig ditt du eller en er ett for fran han har hon i inte jag man med men mig min mina "
        "mitt ni och ocksa om oss pa sa sig sin sina sitt som till vara vi vid att ar"
    ),
    "polish": (
        "a aby ale bo by był była było byc czy dla do go i ich ja je jego jej jest juz lub ma mi mnie moj moja moje mu "
        "na nad nie nim o od oraz po pod przez przy sa sie ta tak te ten to tu w we z za ze"
    ),
    "danish": (
        "af at da de dem den denne der det dette din dine dit du eller en er et for fra han har hun i ikke jeg jer man "
        "med mig min mine mit og om os på sig sin sine sit som til var vi være"
    ),
    "norwegian": (
        "av at da de dem den denne der dere det dette din dine ditt du eller en er et for fra han har hun i ikke jeg "
        "man med meg min mine mitt og om oss på seg sin sine sitt som til var vi være"
    ),
    "finnish": (
        "ei eivät en et että he hän ja jos kun mä me minä mun mutta myös niin nyt oli olen olet on ovat se sen sinä sä "
        "tai te tämä"
    ),
    "hungarian": ("a az azt de egy én és ez ezt ha hogy is már még mert mi nem ő ők te ti van vagy"),
    "romanian": (
        "a al ale am ar are au ca ce cu de din e ea ei el ele este eu in în la le lui mă mi nu o pe pentru sa să se "
        "si și sunt te tu un una unei unui sau"
    ),
    "catalan": (
        "a al als amb de del dels el els en és es i l la les li me meu meva més ni no o per però que se si són un una "
        "uns unes"
    ),
    "serbian": ("a ali da do i ili iz je jer ja k kao me mi na ne nije o od po sa se si sam smo su ti u za"),
    "czech": (
        "a aby ale ani by do i já je jsem jsi jsou k ke mi mně mu na nebo ne o od po pro s se si ta tak také ten to "
        "u v ve z za ze že"
    ),
}


def _without_accents(word: str) -> str:
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.category(c).startswith("M"))


LATIN_LANGUAGES = tuple(_FUNCTION_WORDS)
_STOP = {language: frozenset(map(_without_accents, words.split())) for language, words in _FUNCTION_WORDS.items()}

_STEMMERS = threading.local()  # a Snowball stemmer keeps state between calls: one per thread and language


def _stem(language: str, word: str) -> str:
    stemmers = _STEMMERS.__dict__
    if language not in stemmers:
        stemmers[language] = Stemmer.Stemmer(language)
    return stemmers[language].stemWord(word)


def _lowered(word: str, language: str) -> str:
    """`word` in lower case; in Turkish, its dotted and dotless I as the language pairs them ("I" is "ı", "İ" is "i",
    where str.lower() makes "İ" an "i" and a combining dot)."""
    if language == "turkish":
        word = word.replace("I", "ı").replace("İ", "i")
    return word.lower()


# Serbian Cyrillic letter by letter in Gaj's Latin alphabet, which writes the same language one to one (љ is lj).
_SERBIAN_LATIN = str.maketrans(
    {
        **dict(zip("абвгдђежзијклмнопрстћуфхцчш", "abvgdđežzijklmnoprstćufhcčš", strict=True)),
        **{"љ": "lj", "њ": "nj", "џ": "dž"},
    }
)


def words_stemmed(text: str, language: str | None = None) -> str:
    """`text` with each Cyrillic, Arabic, Devanagari or Greek word as its Snowball stem in Russian, Arabic, Hindi or
    Greek ("пароля" and "паролем" are "парол"; "الحساب", "بالحساب" and "حسابي" are "حساب"; "बदलना" and "बदलें" are "बदल";
    "λογαριασμού" and "λογαριασμό" are "λογαριασμ", without the accent), Cyrillic and Greek in lower case; with
    `language`, one of LATIN_LANGUAGES, each word in Latin letters too: in lower case, left out if it is one of that
    language's function words, else as its stem in that language without accents (Spanish "pedidos" and "pedido" are
    "ped", "envío" and "envio" are "envi"); Serbian writes a Cyrillic word in Latin letters first and reads it as a
    Latin one ("лозинку" and "lozinke" are "lozink"). Every other character is kept as it is. Read on composed text
    (NFC) with its marks, as the stemmers expect. Otherwise a script stands for its most written language: Ukrainian,
    Persian or Marathi are read by the Russian, Arabic or Hindi rules, the same way in a question as in a page."""
    if language is not None and language not in _STOP:
        raise ValueError(f"no stemmer for the language {language!r}")
    if text.isascii() and language is None:
        return text
    text = unicodedata.normalize("NFC", text)
    if language is None:
        return _SCRIPT_WORD.sub(_word_stemmed, text)
    stop = _STOP[language]

    def latin_stemmed(word: str) -> str:
        word = _lowered(word, language)
        if _without_accents(word) in stop:
            return ""
        return _without_accents(_stem(language, word))

    def word_stemmed(match: re.Match) -> str:
        script = match.lastgroup
        if script == "russian" and language == "serbian":
            return latin_stemmed(match.group().lower().translate(_SERBIAN_LATIN))
        if script != "latin":
            return _word_stemmed(match)
        return latin_stemmed(match.group())

    return _SCRIPT_OR_LATIN_WORD.sub(word_stemmed, text)


def _word_stemmed(match: re.Match) -> str:
    language = match.lastgroup
    word = match.group()
    return _stem(language, word.lower() if language in ("russian", "greek") else word)
