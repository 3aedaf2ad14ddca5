import pytest

from kbplatform.text import control_character_problem, has_visible_character


@pytest.mark.parametrize(
    "value, position, code",
    [("a\x01b", 2, "0001"), ("\x1b[2J", 1, "001B"), ("ok\x7f", 3, "007F"), ("x\x85", 2, "0085"), ("\x00", 1, "0000")],
)
def test_a_control_character_is_named_and_placed(value, position, code):
    problem = control_character_problem(value)
    assert f"U+{code} at position {position};" in problem


@pytest.mark.parametrize("value", ["", "plain", "tab\tnew\nline\r", "emoji 👩‍💻 and \u200d", "עברית\u200f", "ß\u00ad"])
def test_text_without_control_characters_passes(value):
    assert control_character_problem(value) is None


@pytest.mark.parametrize("value", ["", " ", "\u200b\u200b", "\ufeff", "\x01\t", "\u2028\u3000"])
def test_nothing_visible(value):
    assert not has_visible_character(value)


@pytest.mark.parametrize("value", ["?", "a", "\u200ba", "中", "🙂", "٣"])
def test_something_visible(value):
    assert has_visible_character(value)
