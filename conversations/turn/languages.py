"""The writing system and language of a message, as far as the platform's own replies need them, and those replies
(small talk, "nothing found") in each language the multilingual model reads. Pure functions, no I/O.

A user who writes "谢谢" is answered "不客气" and not "You're welcome": the platform's replies follow the message they
answer, as an answer generated from the knowledge base does. The language is told by the letters first (Chinese,
Japanese, Korean, Thai, Arabic and Cyrillic are each one language here; Chinese in Traditional characters gets
Traditional replies), and a message in Latin letters by its function words, English unless another language's
outnumber English's. Anything the tables do not tell is English, as every reply was before.
"""

from __future__ import annotations

import re

from conversations.dedup.chinese_text import simplified

# Writing systems told apart by their letters. Japanese is told from Chinese by its kana, which nearly every Japanese
# sentence has and no Chinese one.
_SCRIPTS = {
    "kana": re.compile(r"[\u3041-\u30ff]"),
    "han": re.compile(r"[\u3400-\u9fff\uf900-\ufaff]"),
    "hangul": re.compile(r"[\uac00-\ud7a3]"),
    "thai": re.compile(r"[\u0e01-\u0e5b]"),
    "cyrillic": re.compile(r"[\u0400-\u04ff]"),
    "arabic": re.compile(r"[\u0600-\u06ff]"),
    "latin": re.compile(r"[A-Za-z\u00c0-\u024f]"),
}
# Scripts written by one language each here, so that sharing the script is sharing the language.
ONE_LANGUAGE_SCRIPTS = frozenset({"kana", "han", "hangul", "thai"})


def script_of(text: str) -> str:
    """The writing system most of `text`'s letters are in ("" for none): kana when there is any kana beside at most
    ten times as many Chinese characters (Japanese writes both)."""
    counts = {name: len(pattern.findall(text)) for name, pattern in _SCRIPTS.items()}
    if counts["kana"] and counts["kana"] * 10 >= counts["han"]:
        return "kana"
    counts["kana"] = 0
    name, count = max(counts.items(), key=lambda item: item[1])
    return name if count else ""


_LANGUAGE_OF_SCRIPT = {
    "kana": "ja",
    "han": "zh",
    "hangul": "ko",
    "thai": "th",
    "cyrillic": "ru",
    "arabic": "ar",
}
# Words each language writes often and English does not (its own greetings and thanks among them, so that "gracias"
# alone is Spanish), and English's own. A word two of these languages share counts for both.
_LATIN_SIGNS = {
    "en": frozenset(
        """the is are what how why which when where who does did can could would should have has this that these
        those with from you your my i it hi hello hey thanks thank please""".split()
    ),
    "es": frozenset(
        """el la los las que del cómo qué por para mi mis puedo está hola gracias dónde cuándo una con sí muchas
        buenos buenas días tengo hay""".split()
    ),
    "pt": frozenset(
        """os das dos que do da como meu minha posso está olá oi obrigado obrigada onde quando uma com não sim você
        tenho bom dia""".split()
    ),
    "fr": frozenset(
        """le la les du des que comment quoi pour mon ma mes je est bonjour salut merci où quand une avec ne pas oui
        et vous tu peux puis""".split()
    ),
    "de": frozenset(
        """der die das den dem und wie was für mein meine ich ist hallo danke wo wann eine ein mit nicht ja kann sie
        du zu guten""".split()
    ),
    "it": frozenset(
        """il lo la gli di del che come cosa per mio mia posso è ciao grazie dove quando una con non sì sono buongiorno
        ho""".split()
    ),
    "nl": frozenset(
        """de het een en hoe wat voor mijn ik hallo hoi dank bedankt waar wanneer met niet kan je van""".split()
    ),
    "pl": frozenset(
        """jak co dla mój moja moje mogę jest cześć dzień dobry dziękuję dzięki gdzie kiedy nie tak się czy""".split()
    ),
    "tr": frozenset(
        """nasıl ne için benim bir ve merhaba teşekkürler teşekkür nerede değil evet mi mı mu mü ile selam""".split()
    ),
}
# Letters only one of these languages writes.
_LATIN_LETTERS = {
    "es": re.compile(r"[ñ¿¡]"),
    "pt": re.compile(r"[ãõ]"),
    "de": re.compile(r"[ßäöü]"),
    "pl": re.compile(r"[łąęśźżćń]"),
    "tr": re.compile(r"[ışğ]"),
}
_LATIN_WORD = re.compile(r"[^\W\d_]+")


def reply_language(text: str) -> str:
    """The language of the platform's reply to `text`: "zh" (or "zh-Hant" for Traditional characters), "ja", "ko",
    "th", "ar", "ru", one of the Latin-script languages of `_LATIN_SIGNS`, else "en"."""
    script = script_of(text)
    if script == "han" and simplified(text) != text:
        return "zh-Hant"
    if script in _LANGUAGE_OF_SCRIPT:
        return _LANGUAGE_OF_SCRIPT[script]
    if script != "latin":
        return "en"
    lowered = text.lower()
    words = _LATIN_WORD.findall(lowered)
    votes = {language: sum(word in signs for word in words) for language, signs in _LATIN_SIGNS.items()}
    for language, letters in _LATIN_LETTERS.items():
        votes[language] += 2 * bool(letters.search(lowered))
    best = max(votes, key=lambda language: votes[language])
    return best if votes[best] > votes["en"] else "en"


NOTHING_FOUND = "nothing_found"
NOTHING_NEW = "nothing_new"
# The reply to "show me that again" or "explain that differently" when no earlier question of the conversation names
# a topic: there is nothing to show or explain, and searching the request's own words would find nothing it asks.
NOTHING_EARLIER = "nothing_earlier"
GREETING = "greeting"
THANKS = "thanks"
SMALLTALK = "smalltalk"

# fmt: off
REPLIES: dict[str, dict[str, str]] = {
    "en": {
        GREETING: "Hello! What would you like to know?",
        THANKS: "You're welcome. Anything else?",
        SMALLTALK: "Happy to help. What would you like to know?",
        NOTHING_FOUND: "I found nothing in the knowledge base that answers this.",
        NOTHING_NEW: "I found nothing in the knowledge base that answers this beyond what this conversation has "
        "already shown.",
        NOTHING_EARLIER: "There is no earlier answer in this conversation to show again or explain. What would you "
        "like to know?",
    },
    "zh": {
        GREETING: "你好！请问有什么可以帮你？",
        THANKS: "不客气。还有什么可以帮你的吗？",
        SMALLTALK: "很乐意帮忙。请问你想了解什么？",
        NOTHING_FOUND: "知识库中没有找到能回答这个问题的内容。",
        NOTHING_NEW: "除了这次对话中已经给出的内容，知识库中没有找到能回答这个问题的其他内容。",
        NOTHING_EARLIER: "这次对话中还没有可以再说一遍或换个说法解释的回答。请问你想了解什么？",
    },
    "zh-Hant": {
        GREETING: "你好！請問有什麼可以幫你？",
        THANKS: "不客氣。還有什麼可以幫你的嗎？",
        SMALLTALK: "很樂意幫忙。請問你想了解什麼？",
        NOTHING_FOUND: "知識庫中沒有找到能回答這個問題的內容。",
        NOTHING_NEW: "除了這次對話中已經給出的內容，知識庫中沒有找到能回答這個問題的其他內容。",
        NOTHING_EARLIER: "這次對話中還沒有可以再說一遍或換個說法解釋的回答。請問你想了解什麼？",
    },
    "ja": {
        GREETING: "こんにちは！何をお知りになりたいですか？",
        THANKS: "どういたしまして。ほかにご質問はありますか？",
        SMALLTALK: "喜んでお手伝いします。何をお知りになりたいですか？",
        NOTHING_FOUND: "ナレッジベースには、この質問に答える内容が見つかりませんでした。",
        NOTHING_NEW: "この会話ですでにお見せした内容のほかには、"
        "ナレッジベースにこの質問に答える内容が見つかりませんでした。",
        NOTHING_EARLIER: "この会話にはまだ、もう一度お見せしたり言い換えたりできる回答がありません。"
        "何をお知りになりたいですか？",
    },
    "ko": {
        GREETING: "안녕하세요! 무엇을 알고 싶으신가요?",
        THANKS: "천만에요. 더 궁금한 점이 있으신가요?",
        SMALLTALK: "기꺼이 도와드릴게요. 무엇을 알고 싶으신가요?",
        NOTHING_FOUND: "지식 베이스에서 이 질문에 답하는 내용을 찾지 못했습니다.",
        NOTHING_NEW: "이 대화에서 이미 보여 드린 내용 외에는 지식 베이스에서 이 질문에 답하는 내용을 찾지 못했습니다.",
        NOTHING_EARLIER: "이 대화에는 아직 다시 보여 드리거나 다르게 설명할 답변이 없습니다. 무엇을 알고 싶으신가요?",
    },
    "th": {
        GREETING: "สวัสดี! อยากทราบเรื่องอะไร",
        THANKS: "ยินดีช่วยเหลือ มีอะไรให้ช่วยอีกไหม",
        SMALLTALK: "ยินดีช่วยเหลือ อยากทราบเรื่องอะไร",
        NOTHING_FOUND: "ไม่พบข้อมูลในฐานความรู้ที่ตอบคำถามนี้",
        NOTHING_NEW: "นอกจากสิ่งที่แสดงไปแล้วในการสนทนานี้ ไม่พบข้อมูลในฐานความรู้ที่ตอบคำถามนี้",
        NOTHING_EARLIER: "ยังไม่มีคำตอบก่อนหน้าในการสนทนานี้ให้แสดงซ้ำหรืออธิบายใหม่ อยากทราบเรื่องอะไร",
    },
    "ar": {
        GREETING: "مرحبا! ماذا تريد أن تعرف؟",
        THANKS: "على الرحب والسعة. هل من شيء آخر؟",
        SMALLTALK: "يسعدني المساعدة. ماذا تريد أن تعرف؟",
        NOTHING_FOUND: "لم أجد في قاعدة المعرفة ما يجيب عن هذا السؤال.",
        NOTHING_NEW: "لم أجد في قاعدة المعرفة ما يجيب عن هذا السؤال غير ما عرضته هذه المحادثة بالفعل.",
        NOTHING_EARLIER: "لا توجد في هذه المحادثة إجابة سابقة أعرضها مرة أخرى أو أشرحها بطريقة أخرى. "
        "ماذا تريد أن تعرف؟",
    },
    "ru": {
        GREETING: "Здравствуйте! Что вы хотите узнать?",
        THANKS: "Пожалуйста. Чем ещё могу помочь?",
        SMALLTALK: "С удовольствием помогу. Что вы хотите узнать?",
        NOTHING_FOUND: "В базе знаний не нашлось ничего, что отвечает на этот вопрос.",
        NOTHING_NEW: "Кроме того, что уже было показано в этом разговоре, в базе знаний не нашлось ничего, что "
        "отвечает на этот вопрос.",
        NOTHING_EARLIER: "В этом разговоре ещё нет ответа, который можно показать снова или объяснить иначе. Что вы "
        "хотели бы узнать?",
    },
    "es": {
        GREETING: "¡Hola! ¿Qué te gustaría saber?",
        THANKS: "De nada. ¿Algo más?",
        SMALLTALK: "Con gusto te ayudo. ¿Qué te gustaría saber?",
        NOTHING_FOUND: "No encontré nada en la base de conocimiento que responda a esto.",
        NOTHING_NEW: "No encontré nada en la base de conocimiento que responda a esto, aparte de lo que ya se ha "
        "mostrado en esta conversación.",
        NOTHING_EARLIER: "En esta conversación todavía no hay una respuesta anterior que mostrar de nuevo o explicar "
        "de otra forma. ¿Qué te gustaría saber?",
    },
    "pt": {
        GREETING: "Olá! O que você gostaria de saber?",
        THANKS: "De nada. Mais alguma coisa?",
        SMALLTALK: "Com prazer. O que você gostaria de saber?",
        NOTHING_FOUND: "Não encontrei nada na base de conhecimento que responda a isso.",
        NOTHING_NEW: "Além do que esta conversa já mostrou, não encontrei nada na base de conhecimento que responda a "
        "isso.",
        NOTHING_EARLIER: "Ainda não há nesta conversa uma resposta anterior para mostrar de novo ou explicar de outra "
        "forma. O que você gostaria de saber?",
    },
    "fr": {
        GREETING: "Bonjour ! Que souhaitez-vous savoir ?",
        THANKS: "Je vous en prie. Autre chose ?",
        SMALLTALK: "Avec plaisir. Que souhaitez-vous savoir ?",
        NOTHING_FOUND: "Je n'ai rien trouvé dans la base de connaissances qui réponde à cette question.",
        NOTHING_NEW: "Je n'ai rien trouvé dans la base de connaissances qui réponde à cette question, en dehors de ce "
        "que cette conversation a déjà montré.",
        NOTHING_EARLIER: "Il n'y a pas encore de réponse dans cette conversation à montrer de nouveau ou à expliquer "
        "autrement. Que souhaitez-vous savoir ?",
    },
    "de": {
        GREETING: "Hallo! Was möchten Sie wissen?",
        THANKS: "Gern geschehen. Sonst noch etwas?",
        SMALLTALK: "Ich helfe gern. Was möchten Sie wissen?",
        NOTHING_FOUND: "Ich habe in der Wissensdatenbank nichts gefunden, das diese Frage beantwortet.",
        NOTHING_NEW: "Über das hinaus, was dieses Gespräch bereits gezeigt hat, habe ich in der Wissensdatenbank "
        "nichts gefunden, das diese Frage beantwortet.",
        NOTHING_EARLIER: "In diesem Gespräch gibt es noch keine Antwort, die ich erneut zeigen oder anders erklären "
        "könnte. Was möchten Sie wissen?",
    },
    "it": {
        GREETING: "Ciao! Cosa vorresti sapere?",
        THANKS: "Prego. Serve altro?",
        SMALLTALK: "Volentieri. Cosa vorresti sapere?",
        NOTHING_FOUND: "Non ho trovato nulla nella base di conoscenza che risponda a questa domanda.",
        NOTHING_NEW: "Oltre a quanto già mostrato in questa conversazione, non ho trovato nulla nella base di "
        "conoscenza che risponda a questa domanda.",
        NOTHING_EARLIER: "In questa conversazione non c'è ancora una risposta da mostrare di nuovo o spiegare in altro "
        "modo. Cosa vorresti sapere?",
    },
    "nl": {
        GREETING: "Hallo! Wat wilt u weten?",
        THANKS: "Graag gedaan. Kan ik nog ergens mee helpen?",
        SMALLTALK: "Ik help graag. Wat wilt u weten?",
        NOTHING_FOUND: "Ik heb in de kennisbank niets gevonden dat hierop antwoordt.",
        NOTHING_NEW: "Behalve wat dit gesprek al heeft laten zien, heb ik in de kennisbank niets gevonden dat hierop "
        "antwoordt.",
        NOTHING_EARLIER: "Er is in dit gesprek nog geen antwoord om opnieuw te tonen of anders uit te leggen. Wat "
        "wilt u weten?",
    },
    "pl": {
        GREETING: "Cześć! Co chcesz wiedzieć?",
        THANKS: "Nie ma za co. Czy mogę pomóc w czymś jeszcze?",
        SMALLTALK: "Chętnie pomogę. Co chcesz wiedzieć?",
        NOTHING_FOUND: "W bazie wiedzy nie znaleziono niczego, co odpowiada na to pytanie.",
        NOTHING_NEW: "Poza tym, co ta rozmowa już pokazała, w bazie wiedzy nie znaleziono niczego, co odpowiada na to "
        "pytanie.",
        NOTHING_EARLIER: "W tej rozmowie nie ma jeszcze odpowiedzi, którą mógłbym pokazać ponownie lub wyjaśnić "
        "inaczej. Czego chcesz się dowiedzieć?",
    },
    "tr": {
        GREETING: "Merhaba! Ne öğrenmek istersiniz?",
        THANKS: "Rica ederim. Başka bir şey var mı?",
        SMALLTALK: "Memnuniyetle yardımcı olurum. Ne öğrenmek istersiniz?",
        NOTHING_FOUND: "Bilgi tabanında bu soruyu yanıtlayan bir şey bulamadım.",
        NOTHING_NEW: "Bu konuşmada zaten gösterilenlerin dışında, bilgi tabanında bu soruyu yanıtlayan bir şey "
        "bulamadım.",
        NOTHING_EARLIER: "Bu konuşmada henüz yeniden gösterilecek ya da başka türlü açıklanacak bir yanıt yok. Ne "
        "öğrenmek istersiniz?",
    },
}
# fmt: on


def reply(kind: str, language: str) -> str:
    """The platform's reply of `kind` (GREETING, THANKS, SMALLTALK, NOTHING_FOUND, NOTHING_NEW) in `language`
    (`reply_language`), in English for a language it has none in."""
    return REPLIES.get(language, REPLIES["en"])[kind]


def smalltalk_reply(intent: str, language: str) -> str:
    """The reply to small talk of `intent`: a greeting's, thanks', or the one for any other small talk a tenant
    defines."""
    return reply(intent if intent in (GREETING, THANKS) else SMALLTALK, language)
