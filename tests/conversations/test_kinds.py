"""The kinds reader (`conversations.dedup.kinds`): the literal screen it runs before its full patterns never hides a
kind the full pattern reads, and a kind is counted as often as a question names it."""

import pytest

from conversations.dedup import kinds


@pytest.mark.parametrize(
    ("alternative", "beginnings"),
    [
        (r"\bmondays?\b", {"monday"}),
        (r"\b(?:personal|individual)[ -](?:plans?)\b", {"personal", "individual"}),
        (r"(?<![一二三])(?:周|週)一", {"周", "週"}),
        (r"(?<!la )\bmañana\b", {"mañana"}),
        (r"\bplans?\b", {"plan"}),  # the optional letter is left out
        (r"发货", {"发货"}),
    ],
)
def test_leading_literals(alternative, beginnings):
    assert kinds._leading_literals(alternative) == beginnings


@pytest.mark.parametrize("alternative", [r"[ -]plan", r"\bs[áa]bado", r"(?:a|b)?c", r"\w+day"])
def test_an_alternative_that_does_not_begin_with_literal_text_has_no_beginnings(alternative):
    assert kinds._leading_literals(alternative) is None


def test_a_table_whose_alternative_cannot_be_screened_is_refused():
    with pytest.raises(ValueError, match="literal"):
        kinds.Kinds((("x", (r"\bfoo\b|[ab]ar",)),))


TABLES = [
    kinds.TIERS,
    kinds.STATES,
    kinds.DATES,
    *kinds.RELATIVE_DATES,
    kinds.LANGUAGES,
    kinds.ROLES,
    kinds.CJK_PERIODS,
    *kinds.GROUPS,
    kinds.PARTS_OF_DAY,
    kinds.SEASONS,
    kinds.SIZES,
    kinds.COMPASS,
]
TEXTS = [
    "Can I cancel an order that has shipped?",
    "今天下单今天能到吗",
    "Is the Basic plan cheaper than the Pro plan?",
    "¿Abren el sábado por la mañana?",
    "Muss der Vermieter oder der Mieter zahlen?",
    "有英文版和日文版的说明书吗",
    "一周一次的课可以改到周三吗",
    "What are business days?",
    "月卡和年卡哪个划算",
    "男士和女士的尺码一样吗",
    "Do part-time staff work evenings or mornings?",
    "Is business class or economy class quieter?",
    "Is the summer or the winter menu in size L?",
    "Mサイズとlサイズ、夏休みに届きますか",
    "Is the north or the east exit closer to 东门?",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_screen_reads_what_the_full_patterns_read(text):
    lowered = text.lower()
    for table in TABLES:
        full = {name: len(pattern.findall(lowered)) for name, pattern in table._patterns}
        assert dict(table.named(text)) == {name: n for name, n in full.items() if n}


def test_a_kind_is_counted_as_often_as_it_is_named():
    days = kinds.RELATIVE_DATES[0]
    assert days.named("今天下单今天能到吗") == {"today": 2}
    assert days.differ("今天下单明天能到吗", "今天下单今天能到吗")
    assert not days.differ("Can I order today for delivery tomorrow?", "Order today, delivered tomorrow?")
    assert not days.differ("Can I order today?", "What can I order?")  # one side names none
