"""The built-in intents (greeting, thanks, "show me that again", "explain it differently") on a knowledge base of the
multilingual model, in the 13 languages it reads beside English and Chinese: recognised, and not taken for questions.

Each question goes through the turn's own service calls: the tenant's intents as a turn loads them
(`policy.turn_settings_load`), the question embedded as a turn embeds it (`embed_query`), and its intent as the turn
decides it (`judge.question_intent`). The same-run baseline is the tenant's English examples alone (what decided before
the built-ins held phrasings in these languages): the same call without the shipped phrasings.

What is asked (none of it is a shipped phrase, `builtins.MULTILINGUAL_PHRASES`; the phrasings were written apart from
them): per language, two other phrasings of each built-in intent, which should name that intent, and six questions
about something, several of them with the words "again", "show", "explain" or "in detail", which should stay `other`.
Then, for questions that are no small talk nor requests to repeat, every question of the shared Chinese sets and a
sample of QQP and PAWS-QQP (as a multilingual knowledge base gets them) and every MTRAG user turn: how many name a
built-in intent, before and after. MTRAG's turns include real "thanks"/"tell me more" turns, so its count is printed
with the turns that changed.

Usage: .venv/bin/python bench/intents_languages.py [--sample 5000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"

# language -> intent -> phrasings; "other": questions about something
EVALUATION = {
    "ar": {
        "greeting": ["أهلا", "مساء الخير"],
        "thanks": ["أشكرك", "شكرا لك على المساعدة"],
        "repeat": ["أعد عرض الإجابة", "ممكن تعيد ما قلته؟"],
        "elaborate": ["وضح أكثر من فضلك", "اشرحها لي بكلمات أبسط"],
        "other": ["كيف أعيد تعيين كلمة المرور؟", "متى يصل المبلغ المسترد؟", "أرني رصيد حسابي",
                  "اشرح لي شروط الاسترداد بالتفصيل", "كيف أطلب الفاتورة مرة أخرى؟", "هل يمكنني الدفع بالبطاقة؟"],
    },
    "de": {
        "greeting": ["Servus", "Guten Abend"],
        "thanks": ["Danke sehr", "Danke für die Hilfe"],
        "repeat": ["Wiederhol das bitte", "Zeig die letzte Antwort nochmal"],
        "elaborate": ["Kannst du das ausführlicher erklären?", "Erklär es mir bitte einfacher"],
        "other": ["Wie setze ich mein Passwort zurück?", "Wann kommt die Rückerstattung an?",
                  "Zeig mir meinen Kontostand", "Erkläre die Rückgabebedingungen im Detail",
                  "Wie fordere ich die Rechnung noch einmal an?", "Kann ich mit Karte bezahlen?"],
    },
    "es": {
        "greeting": ["Buenas noches", "Hola, buenos días"],
        "thanks": ["Mil gracias", "Gracias por la ayuda"],
        "repeat": ["Repítelo, por favor", "Vuelve a mostrar la respuesta"],
        "elaborate": ["Explícamelo mejor", "¿Me lo puedes explicar más simple?"],
        "other": ["¿Cómo restablezco mi contraseña?", "¿Cuándo llega el reembolso?", "Muéstrame el saldo de mi cuenta",
                  "Explica en detalle la política de devoluciones", "¿Cómo pido la factura otra vez?",
                  "¿Puedo pagar con tarjeta?"],
    },
    "fr": {
        "greeting": ["Coucou", "Bonjour à vous"],
        "thanks": ["Merci bien", "Merci pour votre aide"],
        "repeat": ["Répète, s'il te plaît", "Remontre-moi la dernière réponse"],
        "elaborate": ["Tu peux expliquer plus clairement ?", "Explique-moi ça plus simplement"],
        "other": ["Comment réinitialiser mon mot de passe ?", "Quand vais-je recevoir mon remboursement ?",
                  "Montre-moi le solde de mon compte", "Explique en détail les conditions de retour",
                  "Comment redemander la facture ?", "Puis-je payer par carte ?"],
    },
    "it": {
        "greeting": ["Salve", "Buon pomeriggio"],
        "thanks": ["Ti ringrazio", "Grazie per l'aiuto"],
        "repeat": ["Ripeti per favore", "Fammi rivedere l'ultima risposta"],
        "elaborate": ["Puoi spiegarlo meglio?", "Spiegamelo in modo più semplice"],
        "other": ["Come reimposto la password?", "Quando arriva il rimborso?", "Mostrami il saldo del conto",
                  "Spiega in dettaglio le condizioni di reso", "Come richiedo di nuovo la fattura?",
                  "Posso pagare con la carta?"],
    },
    "ja": {
        "greeting": ["どうも、こんにちは", "おはよう"],
        "thanks": ["どうもありがとう", "助かります"],
        "repeat": ["もう一回お願いします", "さっきの答えをもう一度表示して"],
        "elaborate": ["もう少し詳しくお願いします", "もっとわかりやすく説明して"],
        "other": ["パスワードをリセットするにはどうすればいいですか？", "返金はいつ届きますか？",
                  "口座の残高を見せてください", "返品条件を詳しく説明してください",
                  "請求書をもう一度発行してもらえますか？", "カードで支払えますか？"],
    },
    "ko": {
        "greeting": ["안녕하십니까", "좋은 저녁이에요"],
        "thanks": ["감사해요", "도와주셔서 감사합니다"],
        "repeat": ["다시 한번 보여줘", "방금 답변 다시 말해줘"],
        "elaborate": ["좀 더 자세히 설명해줘", "더 쉽게 말해 주세요"],
        "other": ["비밀번호를 어떻게 재설정하나요?", "환불은 언제 입금되나요?", "제 계좌 잔액을 보여 주세요",
                  "반품 조건을 자세히 설명해 주세요", "영수증을 다시 발급받을 수 있나요?", "카드로 결제할 수 있나요?"],
    },
    "nl": {
        "greeting": ["Goedenavond", "Hallo daar"],
        "thanks": ["Dank u wel", "Bedankt voor de hulp"],
        "repeat": ["Herhaal dat alsjeblieft", "Toon het laatste antwoord opnieuw"],
        "elaborate": ["Kun je dat duidelijker uitleggen?", "Leg het me simpeler uit"],
        "other": ["Hoe stel ik mijn wachtwoord opnieuw in?", "Wanneer komt de terugbetaling binnen?",
                  "Laat mijn saldo zien", "Leg de retourvoorwaarden in detail uit",
                  "Hoe vraag ik de factuur opnieuw aan?", "Kan ik met een kaart betalen?"],
    },
    "pl": {
        "greeting": ["Dobry wieczór", "Hej"],
        "thanks": ["Wielkie dzięki", "Dziękuję za pomoc"],
        "repeat": ["Powtórz, proszę", "Pokaż ponownie ostatnią odpowiedź"],
        "elaborate": ["Możesz to lepiej wyjaśnić?", "Wytłumacz mi to prościej"],
        "other": ["Jak zresetować hasło?", "Kiedy dotrze zwrot pieniędzy?", "Pokaż saldo mojego konta",
                  "Wyjaśnij szczegółowo warunki zwrotu", "Jak ponownie poprosić o fakturę?",
                  "Czy mogę zapłacić kartą?"],
    },
    "pt": {
        "greeting": ["Boa tarde", "Oi, tudo bom?"],
        "thanks": ["Valeu", "Obrigado pela ajuda"],
        "repeat": ["Repita, por favor", "Mostre de novo a última resposta"],
        "elaborate": ["Pode explicar mais claramente?", "Me explique de um jeito mais simples"],
        "other": ["Como redefino minha senha?", "Quando chega o reembolso?", "Mostre o saldo da minha conta",
                  "Explique em detalhes as condições de devolução", "Como peço a nota fiscal de novo?",
                  "Posso pagar com cartão?"],
    },
    "ru": {
        "greeting": ["Добрый вечер", "Здравствуй"],
        "thanks": ["Спасибо большое за помощь", "Благодарю"],
        "repeat": ["Повтори, пожалуйста", "Покажи последний ответ снова"],
        "elaborate": ["Можешь объяснить понятнее?", "Объясни мне попроще"],
        "other": ["Как сбросить пароль?", "Когда придёт возврат денег?", "Покажи баланс моего счёта",
                  "Подробно объясни условия возврата", "Как снова запросить счёт?", "Можно ли оплатить картой?"],
    },
    "th": {
        "greeting": ["หวัดดี", "สวัสดีตอนเช้า"],
        "thanks": ["ขอบใจนะ", "ขอบคุณที่ช่วยเหลือ"],
        "repeat": ["พูดซ้ำอีกครั้ง", "แสดงคำตอบเมื่อกี้อีกที"],
        "elaborate": ["ขยายความหน่อย", "อธิบายให้เข้าใจง่ายขึ้น"],
        "other": ["ฉันจะรีเซ็ตรหัสผ่านได้อย่างไร", "เงินคืนจะเข้าบัญชีเมื่อไร", "แสดงยอดเงินในบัญชีของฉัน",
                  "อธิบายเงื่อนไขการคืนสินค้าโดยละเอียด", "ขอใบเสร็จใหม่อีกครั้งได้อย่างไร", "ชำระด้วยบัตรได้ไหม"],
    },
    "tr": {
        "greeting": ["İyi akşamlar", "Merhabalar"],
        "thanks": ["Çok sağ ol", "Yardımın için teşekkürler"],
        "repeat": ["Lütfen tekrarla", "Son cevabı yeniden göster"],
        "elaborate": ["Daha açık anlatır mısın?", "Bunu daha basit anlat"],
        "other": ["Şifremi nasıl sıfırlarım?", "İade ne zaman gelir?", "Hesap bakiyemi göster",
                  "İade koşullarını ayrıntılı açıkla", "Faturayı tekrar nasıl isterim?", "Kartla ödeyebilir miyim?"],
    },
}  # fmt: skip


def shared_questions(sample: int) -> dict[str, list[str]]:
    """The questions of the shared sets: each Chinese set whole, QQP and PAWS-QQP sampled (seed 35), MTRAG's user
    turns. Nearly all ask something; OPPO (a voice assistant) and MTRAG also hold small talk of their own."""
    sets: dict[str, list[str]] = {}
    for name in ("bq", "lcqmc", "afqmc_dev", "afqmc_train", "oppo"):
        rows = [json.loads(line) for line in (DATA / "zh" / f"{name}.jsonl").open()]
        sets[name] = sorted({q for r in rows for q in (r["question1"], r["question2"])})
    for name, path in (("qqp", DATA / "qqp" / "pairs.jsonl"), ("paws_qqp", DATA / "paws_qqp" / "pairs.jsonl")):
        rows = [json.loads(line) for line in path.open()]
        questions = sorted({q for r in rows for q in (r["question1"], r["question2"])})
        sets[name] = random.Random(35).sample(questions, min(sample, len(questions)))
    turns = [
        t["question"] for line in (DATA / "mtrag" / "conversations.jsonl").open() for t in json.loads(line)["turns"]
    ]
    sets["mtrag"] = turns
    return sets


def floor_study(model: str) -> None:
    """How PHRASE_FLOOR was chosen, on the shipped phrasings alone: each left out in turn and named by its nearest
    among the others and the built-ins' English examples; per floor, the share named its own intent and the share
    named another. The floor is the lowest at which the second is at its least."""
    import numpy as np

    from conversations.dedup.builtins import BUILTIN_INTENTS, MULTILINGUAL_PHRASES
    from retrieval.embeddings import embed_texts

    rows = [(text, name, False) for name, spec in BUILTIN_INTENTS.items() for text in spec["examples"]]
    rows += [(text, name, True) for name, phrases in MULTILINGUAL_PHRASES.items() for text in phrases]
    texts, intents, shipped = (list(column) for column in zip(*rows, strict=True))
    vectors = embed_texts(texts, model=model)
    scores = vectors @ vectors.T
    np.fill_diagonal(scores, -1.0)
    left_out = np.where(shipped)[0]
    nearest, nearest_score = scores[left_out].argmax(axis=1), scores[left_out].max(axis=1)
    intents = np.array(intents)
    own = intents[nearest] == intents[left_out]
    print(f"\nshipped phrasings left out one at a time ({len(left_out)}): named own intent / another, by floor")
    for floor in (0.60, 0.65, 0.70, 0.72, 0.75, 0.78, 0.80):
        reached = nearest_score >= floor
        print(f"  floor {floor:.2f}: {np.mean(reached & own):.3f} / {np.mean(reached & ~own):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=5000, help="QQP and PAWS-QQP questions each")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from common import load_average, platform

    with platform(name="intents"):
        from dataclasses import replace

        import numpy as np

        from conversations.turn.judge import question_intent
        from conversations.turn.policy import turn_settings_load
        from lifecycle.services import tenant_get_or_create
        from retrieval.embeddings import USE_MODEL_NAME, embed_texts

        model = USE_MODEL_NAME
        tenant, _ = tenant_get_or_create(slug="bench-intents", name="bench intents")
        settings = turn_settings_load(tenant=tenant, model=model)
        english_only = replace(settings, intents=[replace(i, phrases=None) for i in settings.intents])

        def intents_of(questions: list[str]) -> tuple[list[str], list[str]]:
            vectors = embed_texts(questions, model=model) if questions else np.zeros((0, 512))
            after = [question_intent(question=q, question_vector=v, turn_settings=settings, readable=None,
                                     embedding=model)[0] for q, v in zip(questions, vectors, strict=True)]  # fmt: skip
            before = [question_intent(question=q, question_vector=v, turn_settings=english_only, readable=None,
                                      embedding=model)[0] for q, v in zip(questions, vectors, strict=True)]  # fmt: skip
            return before, after

        print(f"model {model}; load {load_average()}")
        floor_study(model)
        print("\nper language: intent phrasings named right (of 8) / questions taken for an intent (of 6)")
        print(f"{'lang':5s} {'before':>14s} {'after':>14s}  wrong after")
        totals = {"before": [0, 0], "after": [0, 0]}
        for language, spec in EVALUATION.items():
            phrasings = [(intent, q) for intent in ("greeting", "thanks", "repeat", "elaborate") for q in spec[intent]]
            before, after = intents_of([q for _, q in phrasings] + spec["other"])
            n = len(phrasings)
            wrong = []
            figures = {}
            for label, got in (("before", before), ("after", after)):
                right = sum(g == want for g, (want, _) in zip(got[:n], phrasings, strict=True))
                taken = sum(g != "other" for g in got[n:])
                figures[label] = (right, taken)
                totals[label][0] += right
                totals[label][1] += taken
            for g, (want, q) in zip(after[:n], phrasings, strict=True):
                if g != want:
                    wrong.append(f"{q} -> {g}")
            for g, q in zip(after[n:], spec["other"], strict=True):
                if g != "other":
                    wrong.append(f"{q} -> {g} (a question)")
            print(
                f"{language:5s} {figures['before'][0]:>6d} / {figures['before'][1]:<5d} "
                f"{figures['after'][0]:>6d} / {figures['after'][1]:<5d}  {'; '.join(wrong)}"
            )
        languages = len(EVALUATION)
        print(
            f"all   {totals['before'][0]:>6d} / {totals['before'][1]:<5d} {totals['after'][0]:>6d} / "
            f"{totals['after'][1]:<5d}  (of {8 * languages} / {6 * languages})"
        )

        print("\nshared questions taken for a built-in intent (before -> after), and those that changed")
        started = time.perf_counter()
        for name, questions in shared_questions(args.sample).items():
            before, after = intents_of(questions)
            taken_before = sum(b != "other" for b in before)
            taken_after = sum(a != "other" for a in after)
            changed = [f"{q!r}: {b} -> {a}" for q, b, a in zip(questions, before, after, strict=True) if a != b]
            print(f"{name:12s} {len(questions):6d} questions  {taken_before:4d} -> {taken_after:4d}")
            for line in changed[:12]:
                print(f"    {line}")
            if len(changed) > 12:
                print(f"    ... {len(changed) - 12} more")
        print(f"(shared sets in {time.perf_counter() - started:.0f}s; load {load_average()})")


if __name__ == "__main__":
    main()
