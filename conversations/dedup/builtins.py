"""The built-in intents every tenant starts with. Plain data, shared by the seeding service and the data
migration that seeds tenants created before conversations existed."""

from __future__ import annotations

BUILTIN_INTENTS: dict[str, dict] = {
    "greeting": {
        "behaviour": "smalltalk",
        "examples": [
            "hi",
            "hello",
            "hey there",
            "good morning",
            "good afternoon",
            "hello, how are you?",
        ],
    },
    "thanks": {
        "behaviour": "smalltalk",
        "examples": [
            "thanks",
            "thank you",
            "thank you very much",
            "thanks, that helps",
            "great, thanks a lot",
            "cheers",
        ],
    },
    "repeat": {
        "behaviour": "repeat",
        "examples": [
            "show me that again",
            "can you repeat that?",
            "show me the previous answer again",
            "what did you say before?",
            "say that again",
            "show the sources again",
        ],
    },
    "elaborate": {
        "behaviour": "elaborate",
        "examples": [
            "explain in more detail",
            "can you elaborate?",
            "say it differently",
            "explain that another way",
            "tell me more about that",
            "I don't understand, explain it more simply",
        ],
    },
}

# The built-in intents' phrasings in the other languages the multilingual embedding model reads, beside the English
# examples a tenant holds (and may edit). A knowledge base on that model compares its questions with these too, for
# the intents of these names the tenant has, with the tenant's behaviour (`conversations.turn.policy.intents_load`):
# across languages the model puts "다시 보여 주세요" 0.78 from "show me that again", under the floor at which the
# nearest example names an intent, while within one language it puts a phrasing near its kin. Chinese is read by rule
# (`intent_rules`) and has none here. An English-only model gets none: most are unknown pieces to it.
# fmt: off
MULTILINGUAL_PHRASES: dict[str, tuple[str, ...]] = {
    "greeting": (
        # ar
        "مرحبا", "السلام عليكم", "صباح الخير", "مرحبا، كيف حالك؟",
        # de
        "hallo", "guten Morgen", "guten Tag", "hallo, wie geht's?",
        # es
        "hola", "buenos días", "buenas tardes", "hola, ¿cómo estás?",
        # fr
        "bonjour", "salut", "bonsoir", "bonjour, comment allez-vous ?",
        # it
        "ciao", "buongiorno", "buonasera", "ciao, come stai?",
        # ja
        "こんにちは", "おはようございます", "こんばんは", "こんにちは、お元気ですか？",
        # ko
        "안녕하세요", "안녕", "좋은 아침입니다", "안녕하세요, 잘 지내세요?",
        # nl
        "hoi", "goedemorgen", "goedemiddag", "hallo, hoe gaat het?",
        # pl
        "cześć", "dzień dobry", "witam", "cześć, jak się masz?",
        # pt
        "olá", "oi", "bom dia", "olá, tudo bem?",
        # ru
        "привет", "здравствуйте", "добрый день", "привет, как дела?",
        # th
        "สวัสดี", "สวัสดีครับ", "สวัสดีค่ะ", "สวัสดีครับ สบายดีไหม",
        # tr
        "merhaba", "selam", "günaydın", "merhaba, nasılsın?",
    ),
    "thanks": (
        # ar
        "شكرا", "شكرا جزيلا", "شكرا، هذا مفيد",
        # de
        "danke", "vielen Dank", "danke, das hilft",
        # es
        "gracias", "muchas gracias", "gracias, eso ayuda",
        # fr
        "merci", "merci beaucoup", "merci, ça m'aide",
        # it
        "grazie", "grazie mille", "grazie, mi è utile",
        # ja
        "ありがとう", "ありがとうございます", "助かりました、ありがとう",
        # ko
        "감사합니다", "고맙습니다", "고마워요", "정말 감사합니다",
        # nl
        "bedankt", "dank je wel", "bedankt, dat helpt",
        # pl
        "dziękuję", "dzięki", "bardzo dziękuję",
        # pt
        "obrigado", "obrigada", "muito obrigado", "obrigado, isso ajuda",
        # ru
        "спасибо", "большое спасибо", "спасибо, это помогло",
        # th
        "ขอบคุณ", "ขอบคุณครับ", "ขอบคุณค่ะ", "ขอบคุณมาก",
        # tr
        "teşekkürler", "teşekkür ederim", "çok teşekkürler", "sağ ol",
    ),
    "repeat": (
        # ar
        "أرني ذلك مرة أخرى", "هل يمكنك التكرار؟", "أرني الإجابة السابقة مرة أخرى", "قلها مرة أخرى",
        # de
        "zeig mir das noch einmal", "kannst du das wiederholen?", "zeig mir die vorherige Antwort noch einmal",
        "sag das nochmal",
        # es
        "muéstramelo otra vez", "¿puedes repetirlo?", "muéstrame la respuesta anterior otra vez", "dilo otra vez",
        # fr
        "montre-moi ça encore", "peux-tu répéter ?", "montre-moi la réponse précédente", "redis-le",
        # it
        "mostramelo di nuovo", "puoi ripeterlo?", "mostrami di nuovo la risposta precedente", "ripetilo",
        # ja
        "もう一度見せてください", "もう一度言ってください", "前の回答をもう一度見せて", "繰り返してください",
        # ko
        "다시 보여 주세요", "다시 말해 주세요", "이전 답변을 다시 보여 주세요", "한 번 더 말해 주세요",
        # nl
        "laat dat nog eens zien", "kun je dat herhalen?", "laat het vorige antwoord nog eens zien", "zeg dat nog eens",
        # pl
        "pokaż to jeszcze raz", "możesz powtórzyć?", "pokaż jeszcze raz poprzednią odpowiedź", "powiedz to jeszcze raz",
        # pt
        "mostre isso de novo", "pode repetir?", "mostre a resposta anterior de novo", "diga de novo",
        # ru
        "покажи это ещё раз", "можешь повторить?", "покажи предыдущий ответ ещё раз", "скажи это снова",
        # th
        "ขอดูอีกครั้ง", "พูดอีกครั้งได้ไหม", "ขอดูคำตอบก่อนหน้าอีกครั้ง", "ช่วยพูดซ้ำอีกที",
        # tr
        "bunu tekrar göster", "tekrar eder misin?", "önceki cevabı tekrar göster", "bir daha söyle",
    ),
    "elaborate": (
        # ar
        "اشرح بمزيد من التفاصيل", "هل يمكنك التوضيح أكثر؟", "قلها بطريقة أخرى", "اشرح ذلك بطريقة مختلفة",
        "لم أفهم، اشرح بشكل أبسط",
        # de
        "erkläre das genauer", "kannst du das näher erläutern?", "sag es anders", "erkläre es auf andere Weise",
        "ich verstehe das nicht, erkläre es einfacher",
        # es
        "explícalo con más detalle", "¿puedes ampliarlo?", "dilo de otra manera", "explícalo de otra forma",
        "no lo entiendo, explícalo más fácil",
        # fr
        "explique plus en détail", "peux-tu développer ?", "dis-le autrement", "explique-le d'une autre façon",
        "je ne comprends pas, explique plus simplement",
        # it
        "spiegalo più in dettaglio", "puoi approfondire?", "dillo in un altro modo", "spiegalo diversamente",
        "non capisco, spiegalo più semplicemente",
        # ja
        "もっと詳しく説明してください", "詳しく教えてください", "別の言い方で説明して", "違う方法で説明してください",
        "わかりません、もっと簡単に説明してください",
        # ko
        "더 자세히 설명해 주세요", "좀 더 자세히 알려 주세요", "다르게 설명해 주세요", "다른 방식으로 설명해 주세요",
        "이해가 안 돼요, 더 쉽게 설명해 주세요",
        # nl
        "leg het uitgebreider uit", "kun je dat toelichten?", "zeg het anders", "leg het op een andere manier uit",
        "ik begrijp het niet, leg het eenvoudiger uit",
        # pl
        "wyjaśnij to dokładniej", "możesz rozwinąć?", "powiedz to inaczej", "wyjaśnij to w inny sposób",
        "nie rozumiem, wyjaśnij prościej",
        # pt
        "explique com mais detalhes", "pode explicar melhor?", "diga de outra forma", "explique de outra maneira",
        "não entendi, explique de forma mais simples",
        # ru
        "объясни подробнее", "можешь рассказать подробнее?", "скажи иначе", "объясни по-другому",
        "я не понимаю, объясни проще",
        # th
        "อธิบายให้ละเอียดกว่านี้", "ช่วยอธิบายเพิ่มเติม", "อธิบายอีกแบบหนึ่ง", "อธิบายด้วยวิธีอื่น",
        "ไม่เข้าใจ ช่วยอธิบายให้ง่ายกว่านี้",
        # tr
        "daha ayrıntılı açıkla", "biraz daha açar mısın?", "başka bir şekilde söyle", "farklı bir şekilde açıkla",
        "anlamadım, daha basit açıkla",
    ),
}
# fmt: on
