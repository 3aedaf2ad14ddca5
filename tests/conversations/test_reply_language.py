"""The language of the platform's own replies: told by the letters, then by function words, English otherwise."""

from __future__ import annotations

import pytest

from conversations.turn import languages
from conversations.turn.languages import REPLIES, reply, reply_language, smalltalk_reply


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("怎么重置密码？", "zh"),
        ("謝謝", "zh-Hant"),
        ("パスワードを忘れました", "ja"),
        ("감사합니다", "ko"),
        ("ขอบคุณ", "th"),
        ("شكرا", "ar"),
        ("спасибо", "ru"),
        ("¿Cómo restablezco mi contraseña?", "es"),
        ("Comment réinitialiser mon mot de passe ?", "fr"),
        ("Wie setze ich mein Passwort zurück?", "de"),
        ("Come reimposto la password?", "it"),
        ("Como redefino minha senha?", "pt"),
        ("Hoe reset ik mijn wachtwoord?", "nl"),
        ("Jak zresetować hasło?", "pl"),
        ("Şifremi nasıl sıfırlarım?", "tr"),
        ("merci", "fr"),
        ("How do I reset my password?", "en"),
        ("refund status?", "en"),
        ("Can I pay in euros?", "en"),
        ("ok", "en"),
        ("???", "en"),
        ("", "en"),
    ],
)
def test_a_message_is_answered_in_the_language_it_is_written_in(text, language):
    assert reply_language(text) == language


def test_every_language_has_every_reply_and_an_unknown_one_is_english():
    kinds = set(REPLIES["en"])
    assert all(set(replies) == kinds for replies in REPLIES.values())
    assert reply(languages.NOTHING_FOUND, "xx") == REPLIES["en"][languages.NOTHING_FOUND]
    assert smalltalk_reply("thanks", "zh") == "不客气。还有什么可以帮你的吗？"
    # Small talk a tenant defines has the general reply.
    assert smalltalk_reply("weather-chat", "de") == REPLIES["de"][languages.SMALLTALK]
