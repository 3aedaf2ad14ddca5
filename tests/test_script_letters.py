import pytest

from kbplatform.script_letters import reading_oddities


@pytest.mark.parametrize(
    "text",
    [
        "Plain ASCII, with McDonald and iPhone.",
        "Le café crème et la crème brûlée sont déjà prêts. Où est la forêt? Noël à l’hôtel.",
        "Příliš žluťoučký kůň úpěl ďábelské ódy.",
        "Zażółć gęślą jaźń. Pchnąć w tę łódź jeża.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю. Подъезд и сьогодні.",
        "ИНСТРУКЦИЯ ПО ЭКСПЛУАТАЦИИ, СССР, ФСБ.",
        "М’ясо і п’ять яблук.",
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Το πρωτεΐνη και ο Σωκράτης.",
        "איך לאפס את הסיסמה?",
        "日本語のテキストです。「パスワード」をリセットする方法。",
        "用iPhone拍照，然后上传到Windows电脑。",
        "¿Qué pasó? 25°C, Word™, €5, l·l, n−3, zero\u200bwidth, soft\u00adhyphen.",
    ],
)
def test_text_as_people_write_it_has_no_oddity(text):
    assert reading_oddities(text) == 0


@pytest.mark.parametrize(
    ("misread", "written"),
    [
        ("Przeciwnik jedynie obowi¹zek kszta³cie.", "Przeciwnik jedynie obowiązek kształcie."),  # a sign in a word
        ("Егю бн дйплйуиЮуейт", "Εγώ αν διολισθήσεις"),  # a capital inside a word
        ("Císaøský řez a dìvèe.", "Císařský řez a děvče."),  # letters no one language writes together
        ("Jak si zmìním heslo? Úèet.", "Jak si změním heslo? Účet."),  # Italian's letters but "í", "ú"
        ("Jak zmieniæ has³o? Mo¿e opuœciæ.", "Jak zmienić hasło? Może opuścić."),  # "¿" ends no word
        ("Èi svobodný výskyt.", "Či svobodný výskyt."),  # Vietnamese's letters, but none it alone has
        ("crθme brûlée", "crème brûlée"),  # two alphabets in a word
        ("Nicht gr黱 und f黵 Brief.", "Nicht grün und für Brief."),  # a lone Chinese character against Latin letters
        ("縐ﾚﾍﾏﾖﾎﾏ ﾎﾉﾚﾋﾉﾊ", "Возможно низкий"),  # half-width katakana
        ("айк мафс аъ дсйсод?", "איך לאפס את הסיסמה?"),  # Cyrillic spelling: ъ after a vowel, й after a consonant
        ("ΰικ μΰτρ ΰϊ δριρξδ?", "איך לאפס את הסיסמה?"),  # Greek spelling: a dialytika on no vowel's neighbour
        ("ฮาฦล ืละยฮอษ", "ОТЖЕ ЧЕРВОНИЙ"),  # a mark on no letter
        ("ΡΩΤ’ΕΙ ΣΤΡΑΒ’", "ΡΩΤΆΕΙ ΣΤΡΑΒΆ"),  # an apostrophe inside a Greek word
        ("ΠΡΟΒΛΗΜΑΤΙΚΗ ΔΙΟΡΘΩΣΗ".encode("cp1253").decode("cp1251"), "ΠΡΟΒΛΗΜΑΤΙΚΗ ΔΙΟΡΘΩΣΗ"),  # no vowel in a word
    ],
)
def test_a_misreading_is_odder_than_the_text_as_written(misread, written):
    assert reading_oddities(misread) > reading_oddities(written)


def test_a_capital_inside_a_word_is_odd_only_beyond_ascii():
    assert reading_oddities("приВет") == 1
    assert reading_oddities("McDonald iPhone") == 0


def test_only_the_start_of_a_long_text_is_judged():
    assert reading_oddities("a" * 10_000 + " kszta³cie") == 0
