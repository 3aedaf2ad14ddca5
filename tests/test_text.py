import re

import pytest

from kbplatform.text import control_character_problem, has_visible_character, marks_as_letters, unspaced_runs_paired


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


@pytest.mark.parametrize(
    ("text", "paired"),
    [
        ("パスワードを忘れた", "パス スワ ワー ード ドを を忘 忘れ"),  # れた: two hiragana, grammar
        ("再設定してください", "再設 設定 定し"),
        ("いくらですか", ""),  # hiragana alone: no word here (its vectors find it)
        ("비밀번호를 잊어버린 경우", "비밀 밀번 번호 호를 잊어 어버 버린 경우"),
        ("退款多久能到账？", "退款 款多 多久 久能 能到 到账 ？"),
        ("iPhone版のアプリ", "iPhone 版の のア アプ プリ"),  # a run is a word of its own beside Latin letters
        ("2段階認証", "2 段階 階認 認証"),
        ("猫", "猫"),  # one letter or two: one word
        ("책 한 권", "책 한 권"),
        ("ｶﾞｲﾄﾞを見る", "ガイ イド ドを を見 見る"),  # half-width katakana as their full-width letters
        ("𠮷野家の牛丼", "𠮷野 野家 家の の牛 牛丼"),  # an ideograph beyond the BMP is one letter
        ("ลมรหสผาน", "ลม มร รห หส สผ ผา าน"),  # Thai, as `marks_as_letters` leaves it
        ("Reset the API key, then log in again.", "Reset the API key, then log in again."),
        ("Привет, мир", "Привет, мир"),
        ("", ""),
    ],
)
def test_runs_of_han_kana_hangul_and_thai_are_read_as_overlapping_pairs_of_letters(text, paired):
    assert unspaced_runs_paired(text) == paired


def test_a_question_and_a_page_share_pairs_where_they_share_a_word():
    """What the pairs are for: a word the question writes alone, or with other grammar joined to it, is pairs the
    page's text also holds."""
    question = set(unspaced_runs_paired("パスワード忘れちゃった").split())
    page = set(unspaced_runs_paired("パスワードを忘れた場合は、再設定してください。").split())
    assert {"パス", "スワ", "ワー", "ード", "忘れ"} <= question & page
    assert {"비밀", "밀번", "번호"} <= set(unspaced_runs_paired("비밀번호는").split()) & set(
        unspaced_runs_paired("비밀번호를").split()
    )


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("हिन्दी", "हइनदई"),  # vowel signs as their letters, the virama left out: one word, not three
        ("किस कैसे", "कइस कऐसए"),  # "which", "how": two words still
        ("ज़्यादा ज्यादा", "जयआदआ जयआदआ"),  # with and without the nukta, one spelling
        ("தமிழ்", "தமஇழ"),  # Tamil, laid out as Devanagari
        ("ลืมรหัสผ่าน", "ลมรหสผาน"),  # Thai vowels and tones above and below the line left out
        ("كَيْفَ", "كيف"),  # Arabic vowel points left out, as most text writes it
        ("re\u0301sume\u0301", "résumé"),  # composed
        ("か\u3099", "が"),
        ("plain ASCII, kept", "plain ASCII, kept"),
        ("Đổi mật khẩu", "Đổi mật khẩu"),
    ],
)
def test_combining_marks_are_composed_read_as_letters_or_left_out(text, read):
    assert marks_as_letters(text) == read
    # What a `\w+` tokenizer reads in it: the words as written between spaces, none cut at a mark.
    assert re.findall(r"\w+", read) == read.replace(",", " ").split()
