"""Negation in the other languages the multilingual embedding model reads (`question_pairs`): German, Spanish, French,
Italian, Portuguese, Dutch, Polish, Russian, Turkish and Arabic have words that say "not", which these rules read as
they read English "not" and Chinese 不. Pure functions, no I/O.

A question and its opposite ("Почему я получил возврат?" / "Почему я не получил возврат?") are as close to the
embedding in these languages as in English, and the duplicate head was fitted on English and Chinese words only: only
this conflict keeps one from being served the other's stored answer.

Some of these words are English words too: French "pas" (a faux pas), Italian "mai" (Chiang Mai), Polish "nie" (an
acronym), Spanish "sin" and Portuguese "sem" (the sine, a semester). They count only in a text with none of
`_ENGLISH_SIGNS`, English function words no text of these languages uses, so English text is read as before.

Japanese, Korean and Thai say "not" inside a word or with no space around it (`negated_in_text`):
- Japanese in a verb's or adjective's ending (届きません, 届かない, 受け取っていない);
- Korean in a word of its own or a verb's ending (안, 못, 받지 않았다, 받지 못했다, 없다, 아니다);
- Thai with ไม่ written into the phrase (ไม่ได้รับ).
Read as the text is written: the letters that make the ending, less the words where those letters deny nothing
(Japanese すみません "excuse me", 少ない "few", 間もなく "soon", the polite request くれませんか "could you";
Korean 아니면 "or else", 없애다 "remove"; Thai ไม่ว่า "whatever", อย่างไร "how").

Italian "non" is read only beside an Italian word that is no English one (English writes "Non proliferation
treaty?" and "a non-work program" with no English sign beside it). Indonesian, Malay and Vietnamese, which users
write though the model was not trained on them, say "not" in a word of its own (tidak, belum, bukan; không, chưa),
which is also how a yes/no question ends: read as a denial only before more of the question. Not read: Turkish
-me/-ma, which also ends nouns (ödeme "payment", ödemede "in the payment" beside ödemedim "I did not pay"); and the
Arabic ما, which also asks "what". docs/conversations.md has what was measured.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

# Words that say "not", "no", "never", "nothing", "none" or "without" and are no English word.
NEGATIONS = frozenset(
    """nicht kein keine keinen keinem keiner keines niemals nichts ohne
    nunca jamás ningún ninguna ninguno tampoco
    jamais aucun aucune rien
    nessun nessuno nessuna niente nulla senza
    não nenhum nenhuma
    niet geen nooit niets zonder
    nigdy żaden żadna żadne bez
    не нет никогда ни ничего нельзя без
    değil yok asla hayır
    لا لم لن ليس ليست بدون
    inte ingen inget aldrig utan
    ikke intet ingenting aldri uden uten
    eivät ette älä ilman
    nem nincs nincsenek soha sosem semmi nélkül
    není nikdy žádný žádná žádné
    nije nisam nisu nismo nikad nikada nema nemam ništa
    niciodată niciodata nimic fără niciun nicio
    δεν μην όχι οχι ποτέ ποτε χωρίς χωρις τίποτα τιποτα κανένα κανενα καμία καμια
    немає ніколи ні""".split()
)
# Negations of these languages that are English words or names as well ("NIC", "Inga"): read only in text that is not
# English.
AMBIGUOUS_NEGATIONS = frozenset("pas mai nie sin sem nada nic inga emme".split())
# Romanian "nu" ("not") is "now" in Dutch, Danish, Norwegian and Swedish, and Finnish "ei" ("does not") is Romanian
# "they" or "her". A wrong stored answer costs more than a fresh one, so in a text that is not English each is read as
# "not" unless the text says it is in the language where it is the other word: by that language's own words ("ik",
# "jeg", "jag"; "este", "fost"), or for Romanian its letters.
_NU_IS_NOW = frozenset("ik het een wil mijn hoe wat waar jeg jag vil kan hvordan hvor hur det er är og och ett".split())
_ROMANIAN_LETTERS = re.compile("[ăâîșşțţ]")
_EI_IS_THEY = frozenset("este sunt fost a al ale lui cu din pe pentru sa si să și".split())
# "ne" on its own is "not" in Czech, Slovak, Serbian, Croatian, Slovene, Hungarian ("don't") and French (beside pas,
# plus, jamais), but "what" in Turkish and "of it" in Italian: read the same way, unless the text is Turkish (its
# letters ı, ğ, ş or its asking words), Italian (`_ITALIAN_SIGNS`, or a pronoun before it: "me ne", "ce ne") or
# Chinese.
_TURKISH_LETTERS = re.compile("[ığş]")
_NE_IS_WHAT = frozenset("nasıl neden nerede niye mı mü kadar zaman için ile bir bu".split())
_ITALIAN_BEFORE_NE = frozenset("me te se ce ve".split())  # Italian "me ne", "se ne", "ce ne": "of it", "from there"
_HAN = re.compile("[\u4e00-\u9fff]")  # in Chinese text "ne" is the particle 呢 typed in pinyin ("被冻结了ne")
# French "n'" before a verb ("je n'ai pas", "ce n'est"): the elided "ne".
_ELIDED_NE = "n'"
# English function words that no text of the languages above uses: one of them says a text is English.
_ENGLISH_SIGNS = frozenset(
    """the is are what how why which when where who whom does did can could would should have has this that these
    those with from you your it's i'm don't""".split()
)
# Dutch writes "is" as English does: the swap rule reads a text with another language's signs on both sides as that
# language even beside "is".
_ENGLISH_SIGNS_BUT_IS = _ENGLISH_SIGNS - {"is"}


# Italian "non" is also English ("non proliferation", "a non-work program"): read only beside a word that is Italian
# and no English word.
_ITALIAN_SIGNS = frozenset(
    "perché ho hai è il gli della dello del che posso puoi sono mio mia cosa questo questa".split()
)
# Languages the model was not trained on but users write, whose "not" is a word of its own: Indonesian and Malay
# (tidak, belum "not yet", bukan, jangan "don't", and the chat forms gak, nggak, enggak) and Vietnamese (không, chưa
# "not yet", chẳng, chả, đừng "don't"). Each also ends a yes/no question ("Sudah diterima atau belum?", "Bạn đã nhận
# được chưa?", "... có ... không?"), where it asks and does not deny: not read as the question's last word, nor after
# "atau" / "hay" ("or").
_WORD_NEGATIONS_TAGGING = frozenset("tidak belum bukan gak nggak enggak không chưa".split())
_WORD_NEGATIONS_PLAIN = frozenset("jangan chẳng chả đừng".split())
_OR = frozenset("atau hay".split())
# Vietnamese không is also "zero" and a syllable of other words: không khí (air), không gian (space), hàng không
# (aviation), không trung (the sky).
_KHONG_WORDS_AFTER = frozenset("khí gian trung".split())
# Vietnamese and Indonesian question endings after which the tag may stand ("... không ạ?", "... belum ya?").
_TRAILING_PARTICLES = frozenset("ạ vậy nhỉ nhé ya kah sih".split())


def _denies_by_word(words: Sequence[str], index: int) -> bool:
    word = words[index]
    if word in _WORD_NEGATIONS_PLAIN:
        return True
    if word not in _WORD_NEGATIONS_TAGGING:
        return False
    rest = [w for w in words[index + 1 :] if w not in _TRAILING_PARTICLES]
    before = words[index - 1] if index else ""
    if not rest or before in _OR:
        return False  # a question tag: "... or not?"
    if word == "không" and (words[index + 1] in _KHONG_WORDS_AFTER or before == "hàng"):
        return False
    return not (word == "tidak" and words[index + 1] == "apa")  # "tidak apa-apa": never mind


def negated(words: Iterable[str]) -> bool:
    """Whether `words` (lowercased, as `question_pairs` reads them) say no in one of these languages."""
    words = list(words)
    if any(word in NEGATIONS for word in words):
        return True
    if any(_denies_by_word(words, index) for index in range(len(words))):
        return True
    if any(word in _ENGLISH_SIGNS for word in words):
        return False
    if "nu" in words and not _NU_IS_NOW.intersection(words):
        return True
    if "ei" in words and not (_EI_IS_THEY.intersection(words) or any(_ROMANIAN_LETTERS.search(w) for w in words)):
        return True
    if "ne" in words and not (
        _NE_IS_WHAT.intersection(words)
        or _ITALIAN_SIGNS.intersection(words)
        or any(_TURKISH_LETTERS.search(w) for w in words)
        or any(words[i - 1] in _ITALIAN_BEFORE_NE for i, w in enumerate(words) if w == "ne" and i)
        or any(_HAN.search(w) for w in words)
    ):
        return True
    if "non" in words and any(word in _ITALIAN_SIGNS for word in words):
        return True
    return any(word in AMBIGUOUS_NEGATIONS or (word.startswith(_ELIDED_NE) and len(word) > 2) for word in words)


# --- numbers written as words -----------------------------------------------------------------------------------

# Cardinal numbers as words in the languages above, by value ("¿Puedo tener dos cuentas?" / "... tres cuentas?",
# cosine 0.93, is two questions as "2" / "3" is). Left out: the words for one, which are also "a" (un, una, ein, um,
# один), eleven (Dutch "onze" is "our"), and the words that are also other common words: English "due" and "cent",
# Italian "sei" ("you are") and "sto" ("I am"), German "bin" ("am"), Turkish "on", "altı" and
# "yüz" ("under", "face"). Read only in a text with none of `_ENGLISH_SIGNS`.
_NUMBER_WORDS = {
    word: value
    for value, words in (
        (2, "dos deux zwei dois duas twee два две dwa dwie iki"),
        (3, "tres trois drei três tre drie три trzy üç"),
        (4, "cuatro quatre vier quatro quattro четыре cztery dört"),
        (5, "cinco cinq fünf cinque vijf пять pięć beş"),
        (6, "seis six sechs zes шесть sześć"),
        (7, "siete sept sieben sete sette zeven семь siedem yedi"),
        (8, "ocho huit acht oito otto восемь osiem sekiz"),
        (9, "nueve neuf neun nove negen девять dziewięć dokuz"),
        (10, "diez dix zehn dez dieci tien десять dziesięć"),
        (12, "doce douze zwölf doze dodici twaalf двенадцать dwanaście"),
        (15, "quince quinze fünfzehn quindici vijftien пятнадцать piętnaście"),
        (20, "veinte vingt zwanzig vinte venti twintig двадцать dwadzieścia yirmi"),
        (30, "treinta trente dreißig trinta trenta dertig тридцать trzydzieści otuz"),
        (100, "cien ciento hundert cem cento honderd сто"),
        (1000, "mille tausend duizend тысяча tysiąc"),
        # Russian in the other cases ("для двух человек", "после трёх попыток"); not "семью", also "family".
        (2, "двух двум двумя"),
        (3, "трёх трех трём трем тремя"),
        (4, "четырёх четырех четырём четырем четырьмя"),
        (5, "пяти пятью"),
        (6, "шести шестью"),
        (7, "семи"),
        (8, "восьми восемью"),
        (9, "девяти девятью"),
        (10, "десяти десятью"),
        (20, "двадцати"),
        (30, "тридцати"),
        # Indonesian and Malay, and Arabic.
        (2, "dua اثنان اثنين"),
        (3, "tiga ثلاثة ثلاث"),
        (4, "empat أربعة أربع"),
        (5, "lima خمسة"),
        (6, "enam ستة"),
        (7, "tujuh سبعة سبع"),
        (8, "delapan ثمانية"),
        (9, "sembilan تسعة تسع"),
        (10, "sepuluh عشرة"),
        (20, "عشرين عشرون"),
        (30, "ثلاثين ثلاثون"),
    )
    for word in words.split()
}
# Vietnamese counts, read only in Vietnamese text (`_VIETNAMESE`: "hai" is also Indonesian "hi") and not after "thứ"
# ("thứ hai", "thứ ba": Monday, Tuesday). Not "năm" (also "year") nor "chín" (also "ripe").
_VIETNAMESE_NUMBERS = {"hai": 2, "ba": 3, "bốn": 4, "sáu": 6, "bảy": 7, "tám": 8, "mười": 10}
_VIETNAMESE = re.compile(r"[\u1ea0-\u1ef9\u0111\u01a1\u01b0]")
_VIETNAMESE_WEEKDAY = "thứ"
# Korean counts, read on the text: a native number before a counter word ("두 명", "세 번", "여섯 달"; "두 번째" is
# the second), a Sino-Korean one before a unit of time or a floor ("삼 일", "칠 일", "십 년"). Each starts a word. Not
# 한 and 일 (one, as English "one" is no count here), nor 이 ("this", "two"), and 오 and 사 only with a space before
# the unit ("오일" is oil).
_KO_NATIVE = {"두": 2, "세": 3, "네": 4, "다섯": 5, "여섯": 6, "일곱": 7, "여덟": 8, "아홉": 9, "열": 10, "스무": 20}
_KO_SINO = {"삼": 3, "사": 4, "오": 5, "육": 6, "칠": 7, "팔": 8, "구": 9, "십": 10}
_KO_NATIVE_COUNT = re.compile(
    r"(?<![\uac00-\ud7a3])("
    + "|".join(_KO_NATIVE)
    + r")\s?(?:개|명|번|장|달|시간|권|대|잔|살|가지|군데|곳|주|박|통|건)"
)
_KO_SINO_COUNT = re.compile(
    r"(?<![\uac00-\ud7a3])("
    + "|".join(_KO_SINO)
    + r")(?:\s(?:일|개월|년|주|시간|분|층|회|차)|(?<![오사])(?:일|개월|년|층))"
    r"(?![\uac00-\ud7a3])"
)


# French "dois" is "must" beside "je" or "tu" ("Dois-je payer ...?", "je dois"), Portuguese "dois" two elsewhere.
_FRENCH_MUST = "dois"
_FRENCH_MUST_SUBJECTS = frozenset({"je", "tu"})


def _french_must(words: Sequence[str], index: int) -> bool:
    return words[index] == _FRENCH_MUST and bool(
        _FRENCH_MUST_SUBJECTS.intersection(words[max(index - 1, 0) : index] + words[index + 1 : index + 2])
    )


# Spanish "siete" (seven) is Italian "you are" ("Siete aperti?"): not a number first in a question, beside "voi", or in
# a text with an Italian sign.
_ITALIAN_YOU_ARE = "siete"


def _italian_you_are(words: Sequence[str], index: int) -> bool:
    return words[index] == _ITALIAN_YOU_ARE and (
        index == 0 or words[index - 1] == "voi" or any(word in _ITALIAN_SIGNS for word in words)
    )


def number_words(words: Sequence[str], text: str) -> set[str]:
    """The values of the cardinal numbers `words` (of `text`) write as words in these languages, as strings ("dos" is
    "2", "삼 일" is "3"); none in a text with an English sign."""
    if any(word in _ENGLISH_SIGNS for word in words):
        return set()
    values = {
        str(_NUMBER_WORDS[word])
        for index, word in enumerate(words)
        if word in _NUMBER_WORDS and not _french_must(words, index) and not _italian_you_are(words, index)
    }
    if _VIETNAMESE.search(text):
        values |= {
            str(_VIETNAMESE_NUMBERS[word])
            for index, word in enumerate(words)
            if word in _VIETNAMESE_NUMBERS and (index == 0 or words[index - 1] != _VIETNAMESE_WEEKDAY)
        }
    if _HANGUL.search(text):
        values |= {str(_KO_NATIVE[match]) for match in _KO_NATIVE_COUNT.findall(text)}
        values |= {str(_KO_SINO[match]) for match in _KO_SINO_COUNT.findall(text)}
    return values


# --- periods of time ---------------------------------------------------------------------------------------------

# Hour, day, week, month and year in these languages, in the forms a question writes them (`question_pairs._PERIODS`
# reads English): "¿Cuánto cuesta al mes?" / "... al año?" and "monatlich" / "jährlich" are two questions. Left out:
# the forms that are other words too: French "an" (English "an") and "mes" ("my": Spanish "mes" counts in "al mes",
# "por mes", "cada mes", "un mes"), German "tag", Italian "ora" ("now"), Polish "lata" (Spanish "can") and "dni"
# (Spanish DNI, the identity card), Portuguese "ano" alone (Spanish "anus": it counts in "por ano", "ao ano", "um
# ano"). Read only in a text with none of `_ENGLISH_SIGNS`.
PERIOD_TERMS = tuple(
    frozenset(forms.split(", "))
    for forms in (
        "hora, horas, heure, heures, stunde, stunden, stündlich, uur, uren, час, часа, часов, godzina, godziny",
        "día, días, diario, diaria, diariamente, dia, dias, diário, diária, jour, jours, quotidien, quotidienne, "
        "quotidiennement, tage, täglich, giorno, giorni, giornaliero, dag, dagen, dagelijks, день, дня, дней, "
        "ежедневно, dzień, dziennie",
        "semana, semanas, semanal, semanalmente, semaine, semaines, hebdomadaire, woche, wochen, wöchentlich, "
        "settimana, settimane, settimanale, weken, wekelijks, неделя, недели, неделю, еженедельно, tydzień, "
        "tygodnie, tygodniowo",
        "al mes, por mes, cada mes, un mes, meses, mensual, mensualmente, mês, meses, mensal, mensalmente, mois, "
        "mensuel, mensuelle, mensuellement, monat, monate, monatlich, mese, mesi, mensile, mensilmente, maand, "
        "maanden, maandelijks, месяц, месяца, месяцев, ежемесячно, miesiąc, miesiące, miesięcznie",
        "año, años, anual, anualmente, por ano, ao ano, um ano, anos, anual, anualmente, ans, année, années, annuel, "
        "annuelle, annuellement, jahr, jahre, jährlich, anno, anni, annuale, annualmente, jaar, jaren, jaarlijks, "
        "год, года, лет, ежегодно, rok, rocznie",
    )
)


def periods_named(words: Sequence[str]) -> set[int]:
    """Which of `PERIOD_TERMS` (by index: hour, day, week, month, year) `words` name, each word and each two words
    in a row read; none in a text with an English sign."""
    if any(word in _ENGLISH_SIGNS for word in words):
        return set()
    terms = set(words) | {f"{one} {two}" for one, two in zip(words, words[1:], strict=False)}
    return {index for index, forms in enumerate(PERIOD_TERMS) if forms & terms}


# --- negation inside a word: Japanese, Korean, Thai -------------------------------------------------------------

# Hiragana and katakana (halfwidth katakana too): a text with them is read for Japanese endings.
_KANA = re.compile(r"[\u3041-\u30ff\uff66-\uff9f]")
# A run of hiragana, of katakana (with its long-vowel mark), or of anything else.
_KANA_RUNS = re.compile(r"[\u3041-\u309f]+|[\u30a0-\u30ff\uff66-\uff9f]+|[^\u3041-\u30ff\uff66-\uff9f]+")
# A verb's or adjective's negative ending (ない, なかった, なくて, なければ, ません), and the kanji that deny the word
# they lead: 未 (not yet: 未着, 未反映), 不可 (not possible), 不要 (not needed), 無効 (invalid), 無し / 無い (none), 非
# ("non-": 非会員, 非公開, 非表示; not 非常 "emergency, very", nor 是非 "by all means").
_JA_NEGATION = re.compile(
    r"ない|なかった|なくて|なければ|なきゃ|ません|未(?![来満])|不可|不要|無効|無し|無い|無く|(?<!是)非(?!常)"
)
# Where those letters deny nothing: "excuse me", "it does not matter (if...)", "few", "dangerous", "soon", "to lose",
# the polite request "could you ..." (くれませんか, いただけないでしょうか: asked as "can you" is), and "I don't
# know / understand", which hedges a question as Chinese 不知道 does. Taken out before the endings are read.
_JA_NOT_NEGATION = re.compile(
    r"すみません|済みません|すいません|かまいません|構いません|少な[いく]|すくな[いく]|危な[いく]|あぶな[いく]"
    r"|間もなく|まもなく|(?:無|な)く(?:す|し)"
    r"|(?:くれ|もらえ|いただけ|頂け)(?:ませんか|ないでしょうか|ないか)"
    r"|(?:わか|分か)(?:らない|らなく|りません)|知(?:らない|らなく|りません)"
)
# Korean: 안 and 못 before a verb are words of their own; the other forms begin a word: -지 않다 / -지 못하다
# (않았다, 못했다), 없다 (there is none, cannot: 할 수 없다), 아니다 (is not), 안 되다 written as one word (안돼요).
_KO_NEGATION_WORDS = frozenset({"안", "못"})
_KO_NEGATION_STARTS = ("않", "못", "없", "아니", "아닌", "아닙", "아냐", "안되", "안돼", "안됩", "안됐", "안될", "안된")
_KO_NOT_NEGATION_STARTS = ("아니면", "없애", "없앨", "없앴")  # "or else"; "to remove"
# -지 마세요 / 말아요: "don't", the 지 ending the word before.
_KO_PROHIBITION_STARTS = ("마세요", "마십시오", "말아", "말라", "말고")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
# Thai ไม่ ("not", written into the phrase: ไม่ได้รับ, ไม่ใช่), ห้าม ("must not"), อย่า ("don't"), but not ไม่ว่า
# ("whatever") or the อย่า of อย่าง ("manner": อย่างไร is "how").
_TH_NEGATION = re.compile(r"ไม่(?!ว่า)|ห้าม|อย่า(?!ง)")
_THAI = re.compile(r"[\u0e01-\u0e5b]")

# Words that carry no content of a question, as English STOPWORDS do: Korean words that say "not" on their own, and
# the Japanese particles, which stand as words of their own where the script changes ("パスワード", "を", "リセット").
FUNCTION_WORDS = _KO_NEGATION_WORDS | frozenset("を は が の に で と も へ や か ね よ".split())


def has_kana(text: str) -> bool:
    return _KANA.search(text) is not None


def kana_words_cut(words: Sequence[str]) -> list[str]:
    """`words` with each word that holds kana cut where its script changes: Japanese writes no spaces, and where
    hiragana gives way to katakana or to anything else (kanji, which the Chinese segmenter cuts) is where a word most
    often ends, so "パスワードをリセット" is パスワード, を, リセット. Other words pass unchanged."""
    return [part for word in words for part in (_KANA_RUNS.findall(word) if _KANA.search(word) else (word,))]


def reads_as_japanese(text: str) -> bool:
    """Whether `text` is Japanese: its last letter is kana (ですか, ません, ください), or kana are at least half its
    letters ("アルバムを非公開に設定する方法", which ends in kanji). A Chinese question that quotes Japanese
    ("日语ない是什么意思", "日语中的こころ是什么意思") ends in Chinese and is mostly Chinese: it is read as Chinese."""
    if not has_kana(text):
        return False
    letters = [character for character in text if character.isalpha()]
    if not letters:  # kana marks alone ("・", "゛") are no letters
        return False
    if _KANA.match(letters[-1]):
        return True
    return 2 * sum(1 for character in letters if _KANA.match(character)) >= len(letters)


def _japanese_negated(text: str) -> bool:
    return has_kana(text) and _JA_NEGATION.search(_JA_NOT_NEGATION.sub(" ", text)) is not None


def _korean_negated(text: str, words: Sequence[str]) -> bool:
    if _HANGUL.search(text) is None:
        return False
    for index, word in enumerate(words):
        if not _HANGUL.match(word):
            continue
        if word in _KO_NEGATION_WORDS:
            return True
        if word.startswith(_KO_NEGATION_STARTS) and not word.startswith(_KO_NOT_NEGATION_STARTS):
            return True
        if word.startswith(_KO_PROHIBITION_STARTS) and index > 0 and words[index - 1].endswith("지"):
            return True
    return False


# Hindi "not" (नहीं, also written नही), "don't" (मत) and "without" (बिना), as words: the rules' words cut Devanagari at
# its vowel signs, so it is read on the text. Not a question's "or not?" (या नहीं, कि नहीं), which asks and does not
# deny.
_HI_NEGATION = re.compile(r"(?<![\u0900-\u097f])(?<!या )(?<!कि )(?:नहीं|नही|मत|बिना)(?![\u0900-\u097f])")


def _hindi_negated(text: str) -> bool:
    return _HI_NEGATION.search(text) is not None


def _thai_negated(text: str) -> bool:
    return _THAI.search(text) is not None and _TH_NEGATION.search(text) is not None


def negated_in_text(text: str, words: Sequence[str]) -> bool:
    """Whether `text` says no in Japanese, Korean or Thai, which write "not" inside a word or without spaces, or in
    Hindi, whose words the rules cut at their vowel signs; `words` are its words as `question_pairs` reads them
    (Korean separates its words with spaces)."""
    return _japanese_negated(text) or _korean_negated(text, words) or _thai_negated(text) or _hindi_negated(text)


# "Not" written onto the word it denies, as Czech, Slovak, Polish, Serbian, Croatian, Russian and Ukrainian write it
# before verbs, adjectives and participles ("neprošla" / "prošla", "nieaktywny" / "aktywny", "неоплаченный" /
# "оплаченный"): no list holds every such word, so a pair is read against itself.
_FUSED_NOT = ("ne", "nie", "не")


def denied_by_prefix(first: Sequence[str], second: Sequence[str]) -> bool:
    """Whether a word of one question is a word of the other with "not" written onto it, and the other does not write
    that word too ("Co mám dělat, když platba neprošla?" / "... prošla?"). The rest of the word has three letters at
    least: "ne" and "nie" begin other words ("need", "nest", "niebo") whose rest is no word of the other question."""
    return _denied_in(first, second) or _denied_in(second, first)


def _denied_in(words: Sequence[str], others: Sequence[str]) -> bool:
    others_set = set(others)
    for word in words:
        if word in others_set:
            continue
        for prefix in _FUSED_NOT:
            rest = word[len(prefix) :]
            if word.startswith(prefix) and len(rest) >= 3 and rest in others_set and rest not in words:
                return True
    return False


# --- opposite actions -------------------------------------------------------------------------------------------

# An action and its opposite in these languages, as `question_pairs._OPPOSITES` has them in English: each side's verb
# in the forms a help-centre question writes it (infinitive, first person, imperative, participle), and the nouns of
# the action. One question naming one side and the other only the other side are two questions, however close the
# embedding puts them ("Wie aktiviere ich Benachrichtigungen?" / "Wie deaktiviere ich ...?" 0.99; both were served by
# the multilingual head before this rule). Read only in text with none of `_ENGLISH_SIGNS`: some forms are English
# words ("active", "open", "sale").
_OPPOSITE_WORDS = tuple(
    (frozenset(one.split()), frozenset(other.split()))
    for one, other in (
        (  # switch on / off
            """activar activo activa activé activado activada ativar ativo ativa ativei ativado ativada attivare attivo
            attiva attivato attivata activer activé activée aktivieren aktiviere aktiviert einschalten schalte
            включить включаю включается включен включена включено включи włączyć włączam włącz włączony włączona
            inschakelen schakel""",
            """desactivar desactivo desactiva desactivé desactivado desactivada desativar desativo desativa desativei
            desativado desativada disattivare disattivo disattiva disattivato disattivata désactiver désactive
            désactivé désactivée deaktivieren deaktiviere deaktiviert ausschalten отключить отключаю отключается
            отключен отключена отключено отключи выключить выключаю выключен выключена выключено выключи wyłączyć
            wyłączam wyłącz wyłączony wyłączona uitschakelen""",
        ),
        (  # log in / out
            """iniciar inicio inicia entrar entro connecter connecte connecté connectée connexion anmelden anmelde
            angemeldet anmeldung einloggen inloggen войти вхожу вход входа zalogować zaloguj zalogowanie giriş""",
            """cerrar cierro cierra cierre sair saio deconnecter déconnecter déconnecte déconnecté déconnectée
            déconnexion abmelden abmelde abgemeldet abmeldung ausloggen uitloggen выйти выхожу выход выхода
            wylogować wyloguj wylogowanie çıkış""",
        ),
        (  # upload / download
            "subir subo sube caricare carico hochladen téléverser uploaden przesłać",
            "descargar descargo descarga scaricare scarico herunterladen runterladen télécharger downloaden pobrać",
        ),
        (  # add / remove
            """añadir añado agregar agrego adicionar adiciono ajouter ajoute aggiungere aggiungo hinzufügen
            toevoegen добавить добавляю dodać dodaj""",
            """eliminar elimino borrar borro quitar quito remover removo excluir excluo apagar apago supprimer
            supprime retirer retire rimuovere rimuovo cancellare cancello entfernen entferne löschen lösche
            verwijderen verwijder удалить удаляю usunąć usuń""",
        ),
        (  # collect / return
            "recoger recojo recoge recogida abholen abhole abholung hole holen",
            "devolver devuelvo devuelve abgeben abgabe gebe zurückgeben rückgabe",
        ),
        ("izquierda gauche links sinistra esquerda", "derecha droite rechts destra direita"),
        # Signing up against signing in; not German "Anmeldung", which is either.
        ("registrarse registro registrarme", "iniciar inicio inicia"),
        (  # open / close
            """abrir abro abre ouvrir ouvre aprire apro apre öffnen öffne открыть открываю otworzyć otwórz openen""",
            """cerrar cierro cierra fechar fecho fechei fermer ferme chiudere chiudo chiude schließen schließe
            закрыть закрываю zamknąć zamknij sluiten sluit""",
        ),
        # The states and parties the English list has (domestic / international, new / existing, buyer / seller,
        # public / private): "envío nacional" / "envío internacional", "Neukunden" / "Bestandskunden".
        (
            """nacional nacionales doméstico doméstica domésticos domésticas nazionale nazionali national nationale
            nationaux nationales inland inländisch inländische inländischen binnenland binnenlandse krajowy krajowa
            krajowe krajowej krajowych внутренний внутренняя внутреннее внутренние внутренних внутреннюю""",
            """internacional internacionales internazionale internazionali international internationale
            internationaux internationales extranjero extranjera exterior étranger estero ausland ausländisch
            ausländische ausländischen buitenland buitenlandse międzynarodowy międzynarodowa międzynarodowe
            międzynarodowej międzynarodowych zagranica zagraniczny zagraniczna международный международная
            международное международные международных международную""",
        ),
        (
            """nuevo nuevos nueva nuevas novo novos nova novas nouveau nouveaux nouvel nouvelle nouvelles nuovo nuovi
            nuova nuove neue neuen neuer neukunde neukunden nieuw nieuwe nowy nowi nowa nowe nowych новый новые
            новая новое новых новым""",
            """existente existentes actual actuales atual atuais existant existants existante existantes ancien
            anciens ancienne anciennes esistente esistenti bestehend bestehende bestehenden bestandskunde
            bestandskunden bestaand bestaande obecny obecni obecna obecnych istniejący istniejącego istniejące
            istniejących существующий существующие существующая существующих текущий текущие текущих""",
        ),
        (
            """comprador compradores compradora acheteur acheteurs acheteuse acquirente acquirenti compratore
            compratori käufer käuferin koper kopers kupujący kupującego kupującemu nabywca покупатель покупателя
            покупателю покупателем покупатели""",
            """vendedor vendedores vendedora vendeur vendeurs vendeuse venditore venditori verkäufer verkäuferin
            verkoper verkopers sprzedający sprzedającego sprzedającemu sprzedawca sprzedawcy продавец продавца
            продавцу продавцом продавцы""",
        ),
        (
            """público pública públicos públicas publico publica public publique publics publiques pubblico pubblica
            pubblici pubbliche öffentlich öffentliche öffentlichen openbaar openbare publiczny publiczna publiczne
            publicznym публичный публичная публичное публичным открытый открытая открытое открытым открытой""",
            """privado privada privados privadas privé privée privés privées privato privata privati private privat
            privaten prywatny prywatna prywatne prywatnym приватный приватная приватное приватным закрытый закрытая
            закрытое закрытым закрытой""",
        ),
    )
)
# German and Dutch split a verb's prefix off to the end of the question ("Wie melde ich mich an?", "Hoe zet ik
# meldingen aan?"): opposite prefixes as the last word say opposite actions.
_OPPOSITE_LAST_WORDS = tuple(
    (frozenset(one.split()), frozenset(other.split()))
    for one, other in (("an", "ab"), ("auf", "zu"), ("ein", "aus"), ("hoch", "herunter runter"), ("aan in", "uit"))
)


# Japanese and Korean write these as loanwords or syllables inside the text, and phrases of the other languages are
# read here too ("fines de semana", "ida y vuelta"), on the text in lower case. The other side is read first and
# taken out, as アンインストール holds インストール and "ida y vuelta" holds "ida"; オン and オフ not inside オンライン,
# オフライン or オフィス, 꺼 not in 꺼내다 ("take out").
def _text_opposites(pairs: Sequence[tuple[str, str]]) -> tuple[tuple[re.Pattern[str], ...], ...]:
    """Each pair of patterns compiled, with a third that finds either side (`_sides` searches it first)."""
    return tuple((re.compile(one), re.compile(other), re.compile(f"{one}|{other}")) for one, other in pairs)


_OPPOSITE_IN_TEXT = _text_opposites(
    (
        ("ログイン|サインイン", "ログアウト|サインアウト"),
        # Checking in and out of a stay, as the Romance languages borrow the English words.
        (
            r"チェックイン|체크인|\bcheck[- ]?ins?\b|\bein(?:ge)?check",
            r"チェックアウト|체크아웃|\bcheck[- ]?outs?\b|\baus(?:ge)?check",
        ),
        ("アップロード", "ダウンロード"),
        ("インポート", "エクスポート"),
        ("インストール", "アンインストール"),
        ("オン(?!ライン)", "オフ(?!ライン|ィス)"),
        ("로그인", "로그아웃"),
        ("업로드", "다운로드"),
        ("켜|켠", "끄|끈|꺼(?!내)"),
        ("추가", "삭제|제거"),
        ("국내", "해외|국제|외국"),
        ("신규", "기존"),
        ("구매자|구매하는 사람", "판매자|판매하는 사람"),
        ("(?<!비)공개", "비공개"),
        ("실내", "실외|야외"),
        ("왼쪽|좌측", "오른쪽|우측"),
        ("다크 ?모드", "라이트 ?모드"),
        ("ダークモード", "ライトモード"),
        (r"\bcubiert[oa]s?\b", r"\bal aire libre\b"),
        ("무선", "유선"),
        ("회원 ?가입|(?<!회원 )가입", "로그인"),
        (r"\binalámbric[oa]s?\b|\bsans fil\b|\bkabellos\w*", r"\bcon cables?\b|\bfilaires?\b|\bkabelgebunden\w*"),
        (
            r"\beinzelzimmer\w*|\bchambres? simples?\b|\bhabitaci[oó]n individual\b",
            r"\bdoppelzimmer\w*|\bchambres? doubles?\b|\bhabitaci[oó]n doble\b",
        ),
        # Weekends / weekdays, one way / a round trip, peak / off-peak, as the English states.
        (
            "fin(?:es)? de semana|week-?ends?|wochenende|fim de semana|fins de semana|fine settimana|выходн|주말",
            "entre semana|d[ií]as (?:laborables|h[aá]biles)|en semaine|jours? ouvrables?|werktags?|unter der woche"
            "|durante a semana|dias [úu]teis|giorn[oi] ferial[ei]|doordeweeks|werkdag|dni robocze|будн|평일",
        ),
        (
            r"\bida\b|aller simple|einfache fahrt|nur hinfahrt|sol[ao] andata|enkele reis|в одну сторону"
            "|w jedną stronę|편도",
            "ida y vuelta|ida e volta|aller[- ]retour|hin- und r[üu]ck|hin und zur[üu]ck|andata e ritorno"
            "|heen en terug|туда и обратно|w obie strony|왕복",
        ),
        ("hora punta|horas punta|heures? de pointe", "hora valle|horas valle|heures? creuses"),
        # A standard against an express service.
        (
            "일반 ?배송|일반 ?택배|(?:envío|envio|livraison|spedizione|entrega|verzending) "
            "(?:estándar|estandar|standard|normal|ordinaire|standaard|padrão|padrao)|standardversand|standardlieferung",
            "특급|빠른 ?배송|익일 ?배송|(?:envío|envio|livraison|spedizione|entrega|verzending) "
            "(?:exprés|expres|express|urgente|rápid[oa]|rapide|expressa)|expressversand|expresslieferung|eilversand",
        ),
    )
)
# The same states and parties in Japanese, read only in text with kana: in Chinese, which writes some of them with the
# same characters (国内, 公开), they are `chinese_text.opposites_differ`'s.
_OPPOSITE_IN_KANA_TEXT = _text_opposites(
    (
        ("国内", "海外|国際|外国"),
        ("新規", "既存"),
        ("購入者|買い手|買主", "販売者|売り手|売主|出品者|出店者"),
        ("(?<!非)公開", "非公開"),
        ("週末|土日", "平日"),
        ("片道", "往復"),
        ("屋内|室内", "屋外|野外"),
        ("受け取|受取", "返却"),
        ("ワイヤレス|無線", "有線"),
        ("元に戻す|取り消し", "やり直"),
        ("会員登録|新規登録", "ログイン"),
        ("本会員", "家族カード|家族会員"),
        ("(?<!右)左(?!右)", "(?<!左)右"),
        ("(?<!オフ)ピーク", "オフピーク"),
        ("通常配送|通常便|普通便", "お急ぎ便|速達|特急便|翌日配送"),
    )
)


# Every side of every pair above, in one pattern.
_ANY_IN_TEXT = re.compile("|".join(either.pattern for _, _, either in _OPPOSITE_IN_TEXT))
_ANY_IN_KANA_TEXT = re.compile("|".join(either.pattern for _, _, either in _OPPOSITE_IN_KANA_TEXT))


@lru_cache(maxsize=1 << 12)
def _sides(text: str, words: tuple[str, ...], *, latin: bool) -> tuple[tuple[bool, bool], ...]:
    """For each opposite pair in turn, whether `text` (its `words` beside it) names the one side and the other; the
    word lists only when `latin` (no English text in the pair). Kept per text, as `question_pairs` keeps its readings:
    a turn's question is read against each candidate."""
    sides: list[tuple[bool, bool]] = []
    if latin:
        # An elided article is part of the word it leads ("l'acheteur").
        named = set(words) | {word[2:] for word in words if word.startswith(_ELIDED)}
        sides += [(bool(one & named), bool(other & named)) for one, other in _OPPOSITE_WORDS]
        last = words[-1] if words else ""
        sides += [(last in one, last in other) for one, other in _OPPOSITE_LAST_WORDS]
    kana = has_kana(text)
    # The patterns are lower case: a case-blind search of many alternatives is several times slower.
    text = text.lower()
    for pairs, any_side, read in (
        (_OPPOSITE_IN_TEXT, _ANY_IN_TEXT, True),
        (_OPPOSITE_IN_KANA_TEXT, _ANY_IN_KANA_TEXT, kana),
    ):
        # Most texts name no side of any pair: one search tells, then one a pair.
        if not read or any_side.search(text) is None:
            sides += [(False, False)] * len(pairs)
            continue
        for one, other, either in pairs:
            if either.search(text) is None:
                sides.append((False, False))
            else:
                sides.append((one.search(other.sub(" ", text)) is not None, other.search(text) is not None))
    return tuple(sides)


# The words that make two things swapped around them two questions: the "than" of a comparison ("más barato que",
# "günstiger als") and its "more" / "less" / "better" ("più economico del"), and the "to" of a move ("de una cuenta
# personal a una de empresa", "von ... zu ...", "d'un ... à ..."), in the languages above. Not "de" ("cambiar la app
# de idioma" asks what "cambiar el idioma de la app" asks). "And", "or", "with" and "vs" are not here: swapped around
# them, two things ask one question ("la diferencia entre A y B").
_SWAP_PIVOTS = frozenset(
    """que a al hacia para como
    do da ao à aos às
    au aux vers
    als zu zum zur nach auf in ins
    che di del della dello dei degli delle alla allo
    dan naar
    чем на в во до
    niż na do w
    más menos mejor peor mayor menor mais melhor pior maior plus moins meilleur meilleure pire più meno migliore
    peggiore maggiore minore mehr weniger besser schlechter meer minder beter slechter больше меньше лучше хуже więcej
    mniej lepszy lepsza gorszy gorsza""".split()
)
# Words that make a comparison symmetric: "A es igual que B" asks what "B es igual que A" asks, and so does "A ist
# anders als B" / "B ist anders als A".
_SYMMETRIC_COMPARISONS = frozenset(
    """igual iguales mismo misma mismos mismas distinto distinta distintos distintas diferente diferentes parecido
    parecida similar similares mesmo mesma iguais semelhante même mêmes pareil pareille différent différente
    différents similaire gleich gleiche gleichen selbe selben dasselbe derselbe dieselbe anders ähnlich verschieden
    stesso stessa stessi uguale uguali diverso diversa simile hetzelfde dezelfde zelfde anders gelijk
    такой такая такое же тот та то одинаковый похож похожа другой другая отличается taki taka takie sam sama samo
    inny inna inne podobny""".split()
)


# Function words of these languages that English never writes: "the" of the rule above says only that a text is not
# English, and an English question with none of `_ENGLISH_SIGNS` ("Will a single phase motor run on a three phase
# source ?") is common; these, a Cyrillic letter or a Latin letter with a mark say that a text is one of them.
_OTHER_LANGUAGE_SIGNS = frozenset(
    """es está están cómo qué cuál cuánto cuándo dónde puedo los las una
    das ist ich wie kann kein mein meine meinen ein eine einem einen einer nicht und wir
    les est je quel quelle quels peut puis mon mes une des
    il gli posso mio mia
    os é posso meu minha uma
    het een hoe ik mijn
    jak czy jest mogę moje""".split()
)
_MARKED_LETTER = re.compile(r"[\u00c0-\u024f\u0400-\u04ff]")


def _reads_as_other_language(text: str, words: Sequence[str]) -> bool:
    """Whether `text` (cut into `words`) shows one of these languages: `_OTHER_LANGUAGE_SIGNS` or `_MARKED_LETTER`."""
    return bool(_MARKED_LETTER.search(text)) or any(word in _OTHER_LANGUAGE_SIGNS for word in words)


# A preposition and article written as one word, read as the preposition ("del iPhone a Android" / "de Android al
# iPhone" swap the same two things), and the articles, set aside: which article a thing takes changes with its place
# ("du téléphone vers l'ordinateur" / "de l'ordinateur vers le téléphone"). Not "a", "de" or "i", which are also
# prepositions and conjunctions.
_CONTRACTIONS = {
    "del": "de", "al": "a", "du": "de", "au": "à", "aux": "à", "dal": "da", "dalla": "da", "nel": "in",
    "nella": "in", "alla": "a", "allo": "a", "vom": "von", "zum": "zu", "zur": "zu", "im": "in", "ins": "in",
    "am": "an", "ao": "a", "aos": "a",
}  # fmt: skip
_ARTICLES = frozenset(
    """el la los las un una unos unas le les une des il lo gli uno o os as um uma der die das den dem ein eine einen
    einem einer eines het een""".split()
)
_ELIDED = ("l'", "d'", "l’", "d’")
# Russian prepositions that take an "о" before some words ("со счёта", "во вкладке"), read as the preposition. Not
# "надо", which is far more often "must" than "над".
_CYRILLIC_PREPOSITIONS = {"со": "с", "во": "в", "ко": "к", "обо": "о", "изо": "из", "подо": "под"}
_CYRILLIC_WORD = re.compile(r"[\u0400-\u04ff]+")
# Russian case and adjective endings, longest first: a noun or adjective names one thing in every case ("с карты на
# счёт" / "со счёта на карту" swap the same two things), so `_swap_words` reads the word without its ending.
_CYRILLIC_ENDINGS = tuple(
    sorted(
        """ами ями ого его ому ему ыми ими ой ей ом ем ах ях ов ев ам ям ую юю ая яя ое ее ые ие ый ий а я о е ы и у ю
        ь""".split(),
        key=len,
        reverse=True,
    )
)
# Fewest letters a Cyrillic word keeps once its ending is taken off: "на", "до", "чем" stay whole.
_CYRILLIC_STEM_MIN = 3


def _cyrillic_stem(word: str) -> str:
    """A Russian word without its case or adjective ending (`_CYRILLIC_ENDINGS`), and "со", "во", "ко" as "с", "в",
    "к" (`_CYRILLIC_PREPOSITIONS`); any other word as it is. A word of another meaning may share a stem ("друга",
    a friend's, reads as "другой", other): at worst a swap is then read as symmetric and not refused."""
    if word in _CYRILLIC_PREPOSITIONS:
        return _CYRILLIC_PREPOSITIONS[word]
    if not _CYRILLIC_WORD.fullmatch(word):
        return word
    for ending in _CYRILLIC_ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= _CYRILLIC_STEM_MIN:
            return word[: -len(ending)]
    return word


# The pivots and the symmetric words as `_swap_words` reads a question's words: "больше" is read "больш".
_SWAP_PIVOTS_READ = frozenset(map(_cyrillic_stem, _SWAP_PIVOTS))
_SYMMETRIC_READ = frozenset(map(_cyrillic_stem, _SYMMETRIC_COMPARISONS))


def _swap_words(words: Sequence[str]) -> tuple[str, ...]:
    """`words` as `ends_swapped` compares them: contractions read as their preposition, articles and elided "l'"
    set aside ("d'un" is "de un", so "de"), Russian words without their case endings (`_cyrillic_stem`)."""
    read: list[str] = []
    for word in words:
        if word.startswith(_ELIDED):
            if word[0] == "d":
                read.append("de")
            word = word[2:]
        word = _cyrillic_stem(_CONTRACTIONS.get(word, word))
        if word and word not in _ARTICLES:
            read.append(word)
    return tuple(read)


def swapped_around(
    first_words: Sequence[str], second_words: Sequence[str]
) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """What two things are swapped around when two questions are the same words with two things swapped: set aside
    what the two share at either end, the rest of one reads X, M, Y and of the other Y, M, X; each such M with X and
    Y different and M not empty, as (the words before X, M): "How did brown eggs become a choice over white ones" /
    "... white eggs ... brown ones" gives (("how", "did"), ("eggs", "become", "a", "choice", "over")). Empty when the
    questions are no such swap; a thing moved across the question ("de A a B" / "a B de A", M empty) is none."""
    start = 0
    while start < min(len(first_words), len(second_words)) and first_words[start] == second_words[start]:
        start += 1
    end = 0
    while (
        end < min(len(first_words), len(second_words)) - start
        and first_words[len(first_words) - 1 - end] == second_words[len(second_words) - 1 - end]
    ):
        end += 1
    one = tuple(first_words[start : len(first_words) - end])
    other = tuple(second_words[start : len(second_words) - end])
    if len(one) != len(other) or len(one) < 3 or sorted(one) != sorted(other):
        return ()
    middles: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for x_length in range(1, len(one) - 1):
        for y_length in range(1, len(one) - x_length):
            x, middle, y = one[:x_length], one[x_length : len(one) - y_length], one[len(one) - y_length :]
            if x != y and other == y + middle + x:
                middles.append((tuple(first_words[:start]), middle))
    return tuple(middles)


def ends_swapped(first_words: Sequence[str], second_words: Sequence[str]) -> bool:
    """Whether the two questions are the same words with two things swapped (`swapped_around`) around a comparison's
    or a move's word (`_SWAP_PIVOTS`): "¿El plan Pro es más barato que el plan Equipo?" / "¿El plan Equipo es más
    barato que el plan Pro?", "Wie wechsle ich von einem privaten Konto zu einem Geschäftskonto?" / "... von einem
    Geschäftskonto zu einem privaten Konto?" (cosine 0.99-1.00: the same words). A comparison that holds both ways
    ("A es igual que B", `_SYMMETRIC_COMPARISONS`) is one question. Words are compared as `_swap_words` reads
    them."""
    first_words, second_words = _swap_words(first_words), _swap_words(second_words)
    for _, middle in swapped_around(first_words, second_words):
        if any(word in _SWAP_PIVOTS_READ for word in middle):
            return not any(word in _SYMMETRIC_READ for word in first_words)
    return False


def reads_as_english(words: Sequence[str]) -> bool:
    """Whether a text cut into `words` has an English function word no text of these languages uses."""
    return any(word in _ENGLISH_SIGNS for word in words)


def opposites_differ(first: str, second: str, first_words: Sequence[str], second_words: Sequence[str]) -> bool:
    """Whether one question asks one side of an action and the other its opposite in these languages (the words
    `question_pairs` reads of each given beside it), neither naming both: "¿Cómo activo ...?" / "¿Cómo desactivo
    ...?", "Wie melde ich mich an?" / "... ab?", "ログインできません" / "ログアウトできません"; swaps two things
    around a comparison or a move (`ends_swapped`); or is the other but for one word of the other side
    (`side_swapped`)."""
    if side_swapped(first, second, tuple(first_words), tuple(second_words)):
        return True
    latin = not any(word in _ENGLISH_SIGNS for word in (*first_words, *second_words))
    swap_read = not any(word in _ENGLISH_SIGNS_BUT_IS for word in (*first_words, *second_words))
    other_language = _reads_as_other_language(first, first_words) and _reads_as_other_language(second, second_words)
    if swap_read and other_language and ends_swapped(first_words, second_words):
        return True
    return any(
        {one, other} == {(True, False), (False, True)}
        for one, other in zip(
            _sides(first, tuple(first_words), latin=latin),
            _sides(second, tuple(second_words), latin=latin),
            strict=True,
        )
    )


# --- before and after ---------------------------------------------------------------------------------------------

# The words that put a question before (0) or after (1) an event in these languages, as English "before" / "after"
# do (`question_pairs.before_after_differ`): "vor dem Versand" / "nach dem Versand", "antes del pago" / "después del
# pago" (cosine 0.94-0.99, all served by the multilingual head before). Keyed as `_swap_words` reads them ("после" is
# "посл"). Left out: Dutch "voor" and Polish "po", far more often "for" and "along" or "in".
_TIME_SIDES = {
    _cyrillic_stem(word): side
    for word, side in (
        ("antes", 0), ("después", 1), ("despues", 1), ("depois", 1), ("avant", 0), ("après", 1), ("apres", 1),
        ("prima", 0), ("dopo", 1), ("vor", 0), ("nach", 1), ("до", 0), ("после", 1),
    )
}  # fmt: skip
# Words between a side's word and its event that name no event: prepositions, articles and contractions not in
# `_ARTICLES`, pronouns, and the "that" of a clause ("depois que eu devolver", "до того, как я оплачу").
_NOT_AN_EVENT = frozenset(
    """de di da a à que che del della dello delle degli dei des do dos das na no nos em en je ich eu io yo wir nous
    noi nós я мы как того чтобы""".split()
)


@lru_cache(maxsize=1 << 12)
def time_sides(words: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """Each side (0 before, 1 after) a question cut into `words` puts an event on in these languages, with the event:
    the first word after the side's word, as `_swap_words` reads it, that is not in `_NOT_AN_EVENT` ("antes del
    pago": (0, "pago")). A side with no such word after it is left out. Kept per question, as every pair reads it."""
    read = _swap_words(words)
    sides = []
    for index, word in enumerate(read):
        side = _TIME_SIDES.get(word)
        if side is None:
            continue
        event = next(
            (later for later in read[index + 1 :] if later not in _NOT_AN_EVENT and later not in _TIME_SIDES), ""
        )
        if event:
            sides.append((side, event))
    return tuple(sides)


# --- one word for the other side --------------------------------------------------------------------------------


# Words that put a question on one side of a thing, in pairs of sides: before / after an event, and to / from a place
# or holder, in the words `_swap_words` reads ("al" as "a", "после" as "посл"). Many are other words as well: Dutch
# "voor" is "for", Polish "po" "along", Spanish "a" a person's "a" and "de" "of", Russian "с" "with", which is why
# `time_sides` reads none of them by itself. Here they are read only where two questions are the same words but one
# of these for one of the other side (`side_swapped`), so the thing is the same one and the word can only name the
# side: "voor de verlenging" / "na de verlenging", "do komputera" / "z komputera", "на другой аккаунт" / "с другого
# аккаунта" (cosine 0.93-0.997 in the multilingual model, served by its head before this rule).
def _side_words(words: str) -> frozenset[str]:
    return frozenset(map(_cyrillic_stem, words.split()))


# The words `time_sides` reads, and the ones it leaves out for being other words as often.
_BEFORE_WORDS = frozenset(word for word, side in _TIME_SIDES.items() if side == 0) | _side_words(
    "voor vóór voordat przed önce قبل"
)
_AFTER_WORDS = frozenset(word for word, side in _TIME_SIDES.items() if side == 1) | _side_words("na nadat po sonra بعد")
_FROM_WORDS = _side_words("de desde depuis da dai dagli dalle dallo von aus van vanaf uit z ze od из с от")
_SIDE_WORD_PAIRS = (
    (_BEFORE_WORDS, _AFTER_WORDS),
    (_side_words("a hacia para pra à vers verso zu nach naar do ku к"), _FROM_WORDS),  # to / from
    # onto or into / from: read only beside a verb that moves something (`_MOVES`)
    (_side_words("sur su sul sulla sui auf in an op aan na в на dans"), _FROM_WORDS),
)
# The pair of `_SIDE_WORD_PAIRS` whose "to" words also say where something is done: "sur le site" / "depuis le
# site", "на сайте" / "с сайта", "sul sito" / "dal sito" ask one question (paying on or from the website) unless
# something is moved: "перенести баллы на другой аккаунт" / "... с другого аккаунта".
_PLACE_PAIR = 2
# The starts of the verbs (and nouns) that move something, in these languages: transfer, move, send, copy, import,
# export, migrate, switch, sync, upload, download.
_MOVES = re.compile(
    r"\b(?:transf|trasf|übertr|überw|überm|overm|overz|przel|przen|przes|перев|перен|перес|перем"
    r"|d[ée]pla|mov|spost|versch|verpl|verl|wechs|overst|przejś|перейт"
    r"|envo|envi|invi|mand|send|schick|stuur|stur|verz|wysł|wysy|отправ"
    r"|copi|kopi|skopi|копир|скопир|import|export|esport|eksport|импорт|экспорт|migr|bascul|synchron|sincron"
    r"|t[ée]l[ée]charg|descarg|baix|scaric|carg|caric|lad|загруз|скач|pobier|pobra)"
)
# Fewest letters two inflected forms of one word share at their start, and most letters either has after that:
# "płatnością" / "płatności", "wysyłką" / "wysyłce", "anderes" / "anderen" (case endings) read as one word.
_STEM_SHARED_MIN, _STEM_TAIL_MAX = 4, 3


def _one_word(one: str, other: str) -> bool:
    """Whether two words are one word in two inflected forms (`_STEM_SHARED_MIN`, `_STEM_TAIL_MAX`); numbers only
    when equal."""
    if one == other:
        return True
    if one.isdigit() or other.isdigit():
        return False
    shared = 0
    for a, b in zip(one, other, strict=False):
        if a != b:
            break
        shared += 1
    return shared >= _STEM_SHARED_MIN and max(len(one), len(other)) - shared <= _STEM_TAIL_MAX


def _words_side_swapped(first_words: Sequence[str], second_words: Sequence[str]) -> bool:
    one, other = _swap_words(first_words), _swap_words(second_words)
    if len(one) != len(other) or one == other:
        return False
    differing = [(a, b) for a, b in zip(one, other, strict=True) if a != b]
    moves = _MOVES.search(" ".join(first_words)) is not None
    sides = [
        (a, b)
        for a, b in differing
        if any(
            (a in left and b in right) or (a in right and b in left)
            for index, (left, right) in enumerate(_SIDE_WORD_PAIRS)
            if index != _PLACE_PAIR or moves
        )
    ]
    return len(sides) == 1 and all(_one_word(a, b) for a, b in differing if (a, b) not in sides)


# The same in the scripts written without spaces between words, or with a side's word joined to its thing: one
# question is the other with one of these written for one of the other side. Japanese 前 / 後 ("発送前" / "発送後",
# "チェックインの前に" / "チェックインの後に"), へ or まで / から ("海外へ" / "海外から"), a group / everyone but it
# ("学生は" / "学生以外は"); Korean 전 / 후 ("입금 전에" / "입금 후에"), a holder's 에게 / 에게서, 한테 / 한테서,
# (으)로 / (으)로부터; Thai ก่อน / หลัง. Japanese に, which also says where and when, is left out.
_SIDE_TEXT_PAIRS = (
    ("전", "후"), ("이전", "이후"), ("에게", "에게서"), ("한테", "한테서"), ("로", "로부터"), ("으로", "으로부터"),
    ("ก่อน", "หลัง"),
)  # fmt: skip
# Read only in text with kana: Chinese has its own reading of 前 / 后 (`chinese_text.opposites_differ`), and 以外
# there ends "除了 ... 以外", "besides".
_JA_SIDE_TEXT_PAIRS = (("前", "後"), ("前", "后"), ("へ", "から"), ("まで", "から"), ("以外", ""))
# Korean (으)로 is "to" and 에서 "from" only beside a verb that moves something: with others they say "by" and "in"
# ("앱으로 주문" / "앱에서 주문", ordering by and in the app, ask one question).
_KO_MOVE_PAIRS = (("로", "에서"), ("으로", "에서"))
_KO_MOVES = re.compile(r"보내|보낼|보냈|송금|이체|옮기|옮겨|옮길|전송|이동|복사|가져오|가져가|배송|발송|입금|출금")
# Japanese writes the event of 前 / 後 as a noun or as a verb with する / した, with or without の between.
_JA_SIDE_LEAD = re.compile(r"(?:の|する|した|して)(?=[前後])")
_SPACES_AND_MARKS = re.compile(r"[\s?!.,;:。、？！，・「」]+")


def _text_of_sides(text: str) -> str:
    return _SPACES_AND_MARKS.sub("", _JA_SIDE_LEAD.sub("", text.lower()))


def _written_for(one: str, other: str, pairs: Sequence[tuple[str, str]]) -> bool:
    """Whether either text is the other with one of a pair's two strings written, at one place, for the other (or,
    for a pair with an empty side, left out)."""
    for left, right in pairs:
        for text, then in ((one, other), (other, one)):
            for old, new in ((left, right), (right, left)):
                start = text.find(old) if old else -1
                while start >= 0:
                    if text[:start] + new + text[start + len(old) :] == then:
                        return True
                    start = text.find(old, start + 1)
    return False


# Korean writes "non-" as 비 before the noun (비회원, 비공개): a word of two syllables or more, and 비 and it.
_KO_NON = "비"
_KO_NON_BASE_MIN = 2
_KO_WORDS = re.compile(r"[\uac00-\ud7a3]+|[^\s\uac00-\ud7a3]+")


def _korean_non(one: str, other: str) -> bool:
    """Whether one Korean question is the other with one word made "non-" (회원도 / 비회원도)."""
    one_words, other_words = _KO_WORDS.findall(one), _KO_WORDS.findall(other)
    if len(one_words) != len(other_words):
        return False
    differing = [(a, b) for a, b in zip(one_words, other_words, strict=True) if a != b]
    if len(differing) != 1:
        return False
    a, b = sorted(differing[0], key=len)
    return len(a) >= _KO_NON_BASE_MIN and b == _KO_NON + a and _HANGUL.match(a) is not None


@lru_cache(maxsize=1 << 12)
def side_swapped(first: str, second: str, first_words: tuple[str, ...], second_words: tuple[str, ...]) -> bool:
    """Whether the two questions are the same but for one word that puts the one on the other side of the same thing
    (`_SIDE_WORD_PAIRS`, `_SIDE_TEXT_PAIRS`): before / after it, to / from it, a group or all but it (学生 / 学生以外,
    회원 / 비회원). Words are compared as `_swap_words` reads them, inflected forms of one word as one (`_one_word`);
    text without spaces between words as written."""
    if reads_as_english(first_words) or reads_as_english(second_words):
        return False
    if _words_side_swapped(first_words, second_words):
        return True
    # What follows reads only Korean, Thai and Japanese (the two texts are one but for a word: one text tells).
    if not (_HANGUL.search(first) or _THAI.search(first) or has_kana(first)):
        return False
    if _korean_non(first.lower(), second.lower()):
        return True
    one, other = _text_of_sides(first), _text_of_sides(second)
    if one == other:
        return False
    if _written_for(one, other, _SIDE_TEXT_PAIRS):
        return True
    if has_kana(one) and has_kana(other) and _written_for(one, other, _JA_SIDE_TEXT_PAIRS):
        return True
    return _KO_MOVES.search(one) is not None and _written_for(one, other, _KO_MOVE_PAIRS)


# --- follow-ups -------------------------------------------------------------------------------------------------

# How a follow-up opens in these languages, as the English "and ...", "but ...", "what about ..." do: "Und für
# Admins?", "¿Y para los administradores?", "А для администраторов?", "じゃあ管理者は？", "그럼 관리자는요?". Read on
# the question's words joined by spaces (so "¿Y para" is "y para"); none is how an English question opens, and a
# one-letter "and" (Italian and Portuguese e, Polish a and i) is left out for that reason (an English "I ...").
_FOLLOWUP_OPENERS = (
    # de
    "und ", "oder ", "aber ", "was ist mit ", "wie ist es mit ", "wie sieht es mit ",
    # es
    "y ", "pero ", "qué pasa con ", "que pasa con ",
    # fr
    "et ", "mais ", "qu'en est il ",
    # it
    "e per ", "e se ", "e invece ", "e quanto ", "ma per ", "ma se ",
    # pt
    "e para ", "mas ", "e sobre ",  # and "e quanto", "e se", as in Italian
    # nl
    "en voor ", "en als ", "maar ", "hoe zit het met ",
    # pl
    "a co z ", "a dla ", "a jeśli ", "a jak ", "ale ",
    # ru
    "а ", "и ", "но ", "а что ", "а если ",
    # tr
    "peki ", "ya ",
    # ar
    "وماذا ", "ماذا عن ", "ولكن ", "وإذا ", "وهل ",
)  # fmt: skip
# The same, for the languages whose text these rules do not cut into words by spaces: read at the start of the text.
_FOLLOWUP_TEXT_OPENERS = (
    # ja: "well then", "if so"
    "じゃあ", "じゃ、", "では、", "それでは", "それなら", "だったら",
    # ko: "then", "and", "by the way"
    "그럼", "그러면", "그리고", "그런데", "근데",
    # th: "and then / what about"
    "แล้ว", "และ",
)  # fmt: skip


def opens_as_followup(text: str, joined_words: str) -> bool:
    """Whether a question opens as a follow-up does in these languages: `joined_words` are its words as
    `question_pairs` reads them, lowercased and joined by single spaces, `text` the question itself."""
    return joined_words.startswith(_FOLLOWUP_OPENERS) or text.lstrip(" \t\n\"'“”「『(（").startswith(
        _FOLLOWUP_TEXT_OPENERS
    )
