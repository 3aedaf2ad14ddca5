"""The platform's own examples through the API: a Chinese help centre on the multilingual model and an English one on
the bundled model, one conversation each. The repeat in other words is served the stored answer, the look-alikes
(another question on the same subject) are not, and every question finds its own document. A looser rewording
("我忘了密码怎么办？" / "I forgot my password, what do I do?" after "怎么重置密码？" / "How do I reset my password?") is
answered afresh in both languages: each model's head calls it different (docs/conversations.md, "The duplicate
head"). In Japanese, Korean and Thai, which say "not" inside a word, a reworded question is served and a question's
opposite never is; so is an English one typed without its apostrophe ("didnt"), and one asking about the opposite
action ("open" / "close")."""

from __future__ import annotations

import pytest

from conversations.models import ConsumedItem
from conversations.services import dedup_policy_update
from conversations.turn import languages
from conversations.turn.answering import NOTHING_FOUND, NOTHING_NEW, answer_similarity_floor
from retrieval import embeddings
from tests.conversations.helpers import HANDBOOK, HELP_CENTRE_ZH, indexed_kb
from tests.conversations.test_api import ask, start

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

HELP_CENTRE_EN = {
    "password": [
        "Reset your password: open Settings, choose Security and click Reset password. A reset link is emailed to you "
        "and stays valid for thirty minutes."
    ],
    "refund": [
        "Request a refund on the order page: click Request refund, give a reason and submit. Once approved, the money "
        "reaches your account in three to five working days."
    ],
    "invoice": ["Invoices are issued within seven days of the order's completion; the electronic invoice is emailed."],
    "delivery": ["Orders ship within forty-eight hours of payment; remote areas may take longer."],
}

# (question, the document it is about, the earlier question it repeats in other words or None)
CONVERSATION_ZH = [
    ("怎么重置密码？", "password", None),
    ("如何申请退款？", "refund", None),
    ("退款多久能到账？", "refund", None),
    ("如何重置密码？", "password", "怎么重置密码？"),
    ("发票什么时候开？", "invoice", None),
    ("下单后多久发货？", "delivery", None),
    ("退款怎么申请？", "refund", "如何申请退款？"),
]
# The same conversation written in Traditional characters (a user in Taiwan or Hong Kong) over the same Simplified help
# centre: the multilingual model reads both scripts, and the rules read Traditional characters as Simplified ones.
CONVERSATION_ZH_TRADITIONAL = [
    ("怎麼重置密碼？", "password", None),
    ("如何申請退款？", "refund", None),
    ("退款多久能到帳？", "refund", None),
    ("如何重置密碼？", "password", "怎麼重置密碼？"),
    ("發票什麼時候開？", "invoice", None),
    ("下單後多久發貨？", "delivery", None),
    ("退款怎麼申請？", "refund", "如何申請退款？"),
]
CONVERSATION_EN = [
    ("How do I reset my password?", "password", None),
    ("How do I request a refund?", "refund", None),
    ("How long does a refund take to arrive?", "refund", None),
    ("How can I reset my password?", "password", "How do I reset my password?"),
    ("When is the invoice issued?", "invoice", None),
    ("When will my order ship?", "delivery", None),
    ("How can I request a refund?", "refund", "How do I request a refund?"),
]


def _typed_full_width(text: str) -> str:
    """`text` as an input method's full-width mode types it: each ASCII character as its full-width form, each space
    as the ideographic one."""
    return "".join(
        "\u3000" if char == " " else chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char for char in text
    )


# The English conversation typed in an input method's full-width mode (a user on a Chinese, Japanese or Korean
# keyboard): the bundled model reads those forms as ASCII, and so does BM25.
CONVERSATION_EN_FULL_WIDTH = [
    (_typed_full_width(question), document, repeats and _typed_full_width(repeats))
    for question, document, repeats in CONVERSATION_EN
]


@pytest.fixture
def services(redis_available, milvus_server):
    return milvus_server


@pytest.mark.parametrize(
    ("documents", "conversation", "model", "analyzer"),
    [
        (HELP_CENTRE_ZH, CONVERSATION_ZH, embeddings.USE_MODEL_NAME, "chinese"),
        (HELP_CENTRE_ZH, CONVERSATION_ZH_TRADITIONAL, embeddings.USE_MODEL_NAME, "chinese"),
        (HELP_CENTRE_EN, CONVERSATION_EN, "all-MiniLM-L6-v2", "english"),
        (HELP_CENTRE_EN, CONVERSATION_EN_FULL_WIDTH, "all-MiniLM-L6-v2", "english"),
    ],
    ids=["chinese", "chinese-traditional", "english", "english-full-width"],
)
def test_repeats_are_served_and_look_alikes_are_not(
    api_client, tenant, services, documents, conversation, model, analyzer
):
    kb = indexed_kb(tenant, documents=documents, name=f"help-{analyzer}", embedding_model=model, text_analyzer=analyzer)
    conversation_id = start(api_client, kb)
    turn_of: dict[str, int] = {}
    for question, document, repeats in conversation:
        body = ask(api_client, conversation_id, question)
        turn_of[question] = body["turn_id"]
        if repeats is None:
            assert body["dedup"]["action"] != "served_cached", (question, body["dedup"])
            assert body["sources"][0]["document_external_id"] == document, (question, body["sources"])
        else:
            assert body["dedup"]["action"] == "served_cached", (question, body["dedup"])
            assert body["dedup"]["matched_turn_id"] == turn_of[repeats], (question, body["dedup"])
            assert body["sources"][0]["document_external_id"] == document


@pytest.mark.parametrize(
    ("first", "again", "documents", "model", "analyzer"),
    [
        ("怎么修改密码？", "怎麼修改密碼？", HELP_CENTRE_ZH, embeddings.USE_MODEL_NAME, "chinese"),
        ("發票什麼時候開？", "发票什么时候开？", HELP_CENTRE_ZH, embeddings.USE_MODEL_NAME, "chinese"),
        ("退款多久能到账？", "退款多久能到賬？", HELP_CENTRE_ZH, embeddings.USE_MODEL_NAME, "chinese"),
        (
            "How do I reset my password?",
            "How do I reset my ｐａｓｓｗｏｒｄ?",
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
        ),
        (
            "When is the ＶＡＴ invoice issued?",
            "When is the VAT invoice issued?",
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
        ),
    ],
)
def test_a_question_asked_again_in_another_spelling_is_served_its_answer(
    api_client, tenant, services, first, again, documents, model, analyzer
):
    """The same question in the other script (a user who writes Traditional characters asks what an earlier turn
    asked in Simplified ones, or the other way round), or with a word typed in an input method's full-width mode: the
    model reads both spellings as one text (the multilingual one Traditional as Simplified, the bundled one
    "ｐａｓｓｗｏｒｄ" as "password"), so the repeat has a cosine of 1 and is served. Read as written, the two scripts
    were 0.77 to 0.91 apart and the head called them different, and one full-width word put a question at 0.73."""
    kb = indexed_kb(tenant, documents=documents, name="help-spellings", embedding_model=model, text_analyzer=analyzer)
    conversation_id = start(api_client, kb)
    asked = ask(api_client, conversation_id, first)
    body = ask(api_client, conversation_id, again)
    assert body["dedup"]["action"] == "served_cached", body["dedup"]
    assert body["dedup"]["matched_turn_id"] == asked["turn_id"]
    assert body["dedup"]["similarity"] == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize(
    ("documents", "model", "analyzer", "off_topic", "on_topic"),
    [
        (HELP_CENTRE_ZH, embeddings.USE_MODEL_NAME, "chinese", "明天北京天气怎么样？", ("退款多久能到账？", "refund")),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "What's the weather like in Paris tomorrow?",
            ("How long does a refund take to arrive?", "refund"),
        ),
    ],
    ids=["chinese", "english"],
)
def test_a_question_the_help_centre_does_not_cover_is_answered_nothing_and_consumes_nothing(
    api_client, tenant, services, documents, model, analyzer, off_topic, on_topic
):
    """Its nearest passages, none sharing a word with it, were quoted as its answer and then left out of the next
    turns' searches as already shown. The reply that says so is in the question's language."""
    nothing = languages.reply(languages.NOTHING_FOUND, languages.reply_language(off_topic))
    kb = indexed_kb(tenant, documents=documents, name=f"help-{analyzer}", embedding_model=model, text_analyzer=analyzer)
    conversation_id = start(api_client, kb)
    body = ask(api_client, conversation_id, off_topic)
    assert body["answer"] == nothing and body["sources"] == [], body
    assert not ConsumedItem.objects.for_tenant(tenant).exists()
    again = ask(api_client, conversation_id, off_topic)
    assert again["dedup"]["action"] != "served_cached" and again["answer"] == nothing, again["dedup"]
    question, document = on_topic
    body = ask(api_client, conversation_id, question)
    assert body["sources"][0]["document_external_id"] == document, body["sources"]
    assert body["answer"] != nothing and "[1]" in body["answer"]
    # The hits' cosines are asked of Milvus only where the answer reads a similarity floor: the bundled model's.
    assert (body["sources"][0]["similarity"] is None) == (answer_similarity_floor(model) is None), body["sources"]
    # That turn showed the whole help centre: the window leaves it all out, the relax rule searches it again, and
    # nothing in it answers the question, shown before or not.
    again = ask(api_client, conversation_id, off_topic)
    assert again["dedup"]["relaxed"] is True and again["answer"] == nothing and again["sources"] == [], again


def test_a_question_sharing_words_not_meaning_with_the_help_centre_is_answered_nothing(
    api_client, tenant, services, settings
):
    """A lexical search needs only a shared word: "money" and "account" are in the refund passage, which the search
    finds for a question about interest. The bundled model's cosine of the two is under its similarity floor, so
    nothing is quoted; a question the passage answers is over it."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_EN, name="help-floor", embedding_model="all-MiniLM-L6-v2")
    floor = answer_similarity_floor("all-MiniLM-L6-v2")
    off_topic = "Can the money in my account earn interest?"
    found = api_client.post(f"/api/v1/knowledge-bases/{kb.pk}/search/", {"query": off_topic}, format="json").json()
    refund = next(hit for hit in found["results"] if hit["document_external_id"] == "refund")
    assert refund["similarity"] < floor, refund
    conversation_id = start(api_client, kb)
    body = ask(api_client, conversation_id, off_topic)
    assert body["answer"] == NOTHING_FOUND and body["sources"] == [], body
    assert not ConsumedItem.objects.for_tenant(tenant).exists()
    body = ask(api_client, conversation_id, "How long does a refund take to arrive?")
    assert body["sources"][0]["document_external_id"] == "refund", body["sources"]
    assert body["sources"][0]["similarity"] >= floor and "[1]" in body["answer"], body
    # A deployment that removes the floor (ANSWER_SIMILARITY_FLOORS=all-MiniLM-L6-v2=off) quotes the shared word again.
    settings.ANSWER_SIMILARITY_FLOORS = {"all-MiniLM-L6-v2": None}
    body = ask(api_client, start(api_client, kb), off_topic)
    assert body["answer"] != NOTHING_FOUND and body["sources"], body


# Per handbook document, a question only its text shares a content word with.
ASKED_OF = {
    "pricing": "How many dollars does the Enterprise contract cost?",
    "admins": "Who can see the audit log?",
    "api-keys": "Can a revoked key still be used?",
    "sso": "Does it support SAML?",
    "export": "Can I get a CSV of the reports?",
    "retention": "How long does the trash keep things?",
    "mobile": "Does the app run on Android?",
}


def test_a_question_only_passages_already_shown_answer_is_told_so_and_shown_nothing_again(api_client, tenant, services):
    """The exclusion window leaves out what the last turns showed, answered or not: the passages left share no word
    with a question on a document shown as a lower source before, and were quoted as its answer."""
    kb = indexed_kb(tenant)
    dedup_policy_update(tenant=tenant, min_results=0)  # never searched again for want of results
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I reset my password?")
    shown = [source["document_external_id"] for source in first["sources"]]
    assert shown[0] == "password" and len(shown) < len(HANDBOOK), shown
    document = next(document for document in shown[1:] if document in ASKED_OF)
    consumed = ConsumedItem.objects.for_tenant(tenant).count()
    body = ask(api_client, conversation_id, ASKED_OF[document])
    assert body["answer"] == NOTHING_NEW and body["sources"] == [], body
    assert body["dedup"]["excluded_count"] == len(shown) and body["dedup"]["relaxed"] is False, body["dedup"]
    assert ConsumedItem.objects.for_tenant(tenant).count() == consumed
    # Asked on its own, the question is answered from that document.
    alone = ask(api_client, start(api_client, kb), ASKED_OF[document])
    assert alone["sources"][0]["document_external_id"] == document, alone["sources"]
    assert alone["answer"].split(" [1]")[0] in HANDBOOK[document][0], alone["answer"]


# The multilingual model's languages that say "not" inside a word or without spaces. Per language: a question and
# the same question reworded, which is served; a statement and its opposite, which is not (the embedding puts them
# 0.93-0.95 apart, and the shipped head served each opposite before the rules read these languages' negation).
HELP_CENTRE_OTHER = {
    "refund-ja": ["返金は承認後、三から五営業日で口座に入金されます。届かない場合はサポートにご連絡ください。"],
    "refund-ko": ["환불은 승인 후 3~5 영업일 안에 계좌로 입금됩니다. 받지 못한 경우 고객센터에 문의하세요."],
    "refund-th": ["เงินคืนจะเข้าบัญชีภายในสามถึงห้าวันทำการหลังอนุมัติ หากไม่ได้รับโปรดติดต่อฝ่ายบริการ"],
}
REPEATS_AND_OPPOSITES = [
    (
        "返金はいつ届きますか？",
        "返金はいつ届くのですか？",
        "返金が届きました。いつ口座に入りますか？",
        "返金が届きません。いつ口座に入りますか？",
    ),
    (
        "환불은 언제 입금되나요?",
        "환불은 언제 입금돼요?",
        "환불을 받았습니다. 언제 입금되나요?",
        "환불을 받지 못했습니다. 언제 입금되나요?",
    ),
    ("เงินคืนจะเข้าบัญชีเมื่อไร", "เงินคืนจะเข้าบัญชีเมื่อไหร่", "ทำไมฉันได้รับเงินคืน", "ทำไมฉันไม่ได้รับเงินคืน"),
]


@pytest.mark.parametrize(
    ("question", "reworded", "statement", "opposite"), REPEATS_AND_OPPOSITES, ids=["japanese", "korean", "thai"]
)
def test_a_negation_written_inside_a_word_is_never_served_its_opposite(
    api_client, tenant, services, question, reworded, statement, opposite
):
    kb = indexed_kb(tenant, documents=HELP_CENTRE_OTHER, name="help-other", embedding_model=embeddings.USE_MODEL_NAME)
    repeat = start(api_client, kb)
    first = ask(api_client, repeat, question)
    served = ask(api_client, repeat, reworded)
    assert served["dedup"]["action"] == "served_cached", served["dedup"]
    assert served["dedup"]["matched_turn_id"] == first["turn_id"]

    opposites = start(api_client, kb)
    ask(api_client, opposites, statement)
    refused = ask(api_client, opposites, opposite)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == "negation differs", refused["dedup"]


# Languages neither model was trained on, whose knowledge bases name their analyser: a question repeated is served,
# and the same statement denied (a word of its own, or "not" written onto the verb in Czech) is refused.
DENIALS_BY_ANALYSER = [
    (
        "danish",
        {"card-da": ["Kortbetaling i butikken er muligt med alle danske og udenlandske kort."]},
        ("Kan jeg betale med kort i butikken?", "kan jeg betale med kort i butikken"),
        ("Betalingen er gået igennem. Hvad nu?", "Betalingen er ikke gået igennem. Hvad nu?"),
    ),
    (
        "czech",
        {"card-cs": ["Platba kartou na prodejně je možná se všemi kartami."]},
        ("Můžu platit kartou na prodejně?", "můžu platit kartou na prodejně"),
        ("Platba kartou prošla. Co teď?", "Platba kartou neprošla. Co teď?"),
    ),
    (
        "english",  # Greek: its words are stemmed by script under the default analyser
        {"card-el": ["Η πληρωμή με κάρτα στο κατάστημα είναι δυνατή με όλες τις κάρτες."]},
        ("Μπορώ να πληρώσω με κάρτα στο κατάστημα;", "μπορώ να πληρώσω με κάρτα στο κατάστημα"),
        ("Η πληρωμή πέρασε. Τι κάνω τώρα;", "Η πληρωμή δεν πέρασε. Τι κάνω τώρα;"),
    ),
]


@pytest.mark.parametrize(
    ("analyzer", "documents", "repeat", "denial"), DENIALS_BY_ANALYSER, ids=["danish", "czech", "greek"]
)
def test_a_denial_in_a_language_the_analysers_added_is_never_served_its_statements_answer(
    api_client, tenant, services, analyzer, documents, repeat, denial
):
    kb = indexed_kb(tenant, documents=documents, name=f"help-{analyzer}", text_analyzer=analyzer)
    conversation = start(api_client, kb)
    first = ask(api_client, conversation, repeat[0])
    served = ask(api_client, conversation, repeat[1])
    assert served["dedup"]["action"] == "served_cached", served["dedup"]
    assert served["dedup"]["matched_turn_id"] == first["turn_id"]

    conversation = start(api_client, kb)
    ask(api_client, conversation, denial[0])
    refused = ask(api_client, conversation, denial[1])
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == "negation differs", refused["dedup"]


def test_the_built_in_intents_are_recognised_in_the_multilingual_models_other_languages(api_client, tenant, services):
    """ "Show me that again", "explain it differently" and thanks in Korean, Japanese and Russian on a multilingual
    knowledge base: the built-ins' own phrasings in those languages name them (the tenant's English examples sit
    under the floor across languages). An English knowledge base reads none of them."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_OTHER, name="help-other", embedding_model=embeddings.USE_MODEL_NAME)
    conversation = start(api_client, kb)
    first = ask(api_client, conversation, "환불은 언제 입금되나요?")
    assert first["dedup"]["intent"] == "other"
    again = ask(api_client, conversation, "다시 보여 주세요")
    assert again["dedup"]["intent"] == "repeat", again["dedup"]
    assert [s["chunk_id"] for s in again["sources"]] == [s["chunk_id"] for s in first["sources"]]
    differently = ask(api_client, conversation, "別の言い方で説明して")
    assert differently["dedup"]["intent"] == "elaborate", differently["dedup"]
    thanks = ask(api_client, conversation, "Спасибо")
    assert (thanks["dedup"]["intent"], thanks["dedup"]["action"]) == ("thanks", "smalltalk")

    english = indexed_kb(tenant, documents=HELP_CENTRE_EN, name="help-en", embedding_model="all-MiniLM-L6-v2")
    conversation = start(api_client, english)
    ask(api_client, conversation, "How long does a refund take to arrive?")
    assert ask(api_client, conversation, "다시 보여 주세요")["dedup"]["intent"] == "other"


@pytest.mark.parametrize(
    ("first_topic", "followup", "second_topic"),
    [
        ("Wie setze ich mein Passwort zurück?", "Und für Admins?", "Wie lange dauert eine Rückerstattung?"),
        ("¿Cómo restablezco mi contraseña?", "¿Y para los administradores?", "¿Cuánto tarda un reembolso?"),
        ("Как сбросить пароль?", "А для администраторов?", "Сколько идёт возврат денег?"),
        ("パスワードをリセットするには？", "じゃあ管理者は？", "返金にはどのくらいかかりますか？"),
        ("비밀번호를 어떻게 재설정하나요?", "그럼 관리자는요?", "환불은 얼마나 걸리나요?"),
    ],
    ids=["german", "spanish", "russian", "japanese", "korean"],
)
def test_a_follow_up_in_another_language_is_not_served_its_answer_in_another_context(
    api_client, tenant, services, first_topic, followup, second_topic
):
    """ "And for admins?" after a password question, asked again after a refund question, is about refunds: the
    follow-up guard refuses the stored answer, as it does in English and Chinese."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_OTHER, name="help-other", embedding_model=embeddings.USE_MODEL_NAME)
    conversation = start(api_client, kb)
    ask(api_client, conversation, first_topic)
    ask(api_client, conversation, followup)
    ask(api_client, conversation, second_topic)
    again = ask(api_client, conversation, followup)
    assert again["dedup"]["action"] != "served_cached", again["dedup"]
    assert again["dedup"]["reason"] == "follow-up in another context", again["dedup"]


@pytest.mark.parametrize(
    ("statement", "opposite"),
    [
        ("Why did I get a refund?", "why didnt I get a refund"),
        ("My refund arrived, what now?", "My refund didnt arrive, what now?"),
        ("Can I reset my password from the app?", "Cant I reset my password from the app?"),
    ],
    ids=["didnt", "didnt-statement", "cant"],
)
def test_a_contraction_typed_without_its_apostrophe_is_never_served_its_opposite(
    api_client, tenant, services, statement, opposite
):
    """Users often type "didnt" and "cant". Unread, the opposite question was served: the bundled model puts each
    pair 0.91-0.97 apart, and the head called each a duplicate (p 0.77-0.89, its cut 0.73)."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_EN, name="help-english")
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, statement)
    refused = ask(api_client, conversation_id, opposite)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == "negation differs", refused["dedup"]


HELP_CENTRE_ZH_DATA = {
    **HELP_CENTRE_ZH,
    "data": [
        "导出数据：在设置中打开数据管理，点击导出，文件会发送到您的邮箱。导入数据：在数据管理中点击导入并选择文件。"
    ],
}


@pytest.mark.parametrize(
    ("documents", "model", "analyzer", "question", "opposite"),
    [
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "What time does the store open on Sunday?",
            "What time does the store close on Sunday?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Can I switch from a personal account to a business account?",
            "Can I switch from a business account to a personal account?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "How do I make my project public?",
            "How do I make my project private?",
        ),
        (HELP_CENTRE_ZH_DATA, embeddings.USE_MODEL_NAME, "chinese", "怎么导出数据？", "怎么导入数据？"),
        (HELP_CENTRE_ZH_DATA, embeddings.USE_MODEL_NAME, "chinese", "发货前能退款吗？", "发货后能退款吗？"),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Can I get a refund after shipping?",
            "Can I get a refund before shipping?",
        ),
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "Can I cancel my order before it ships?",
            "Can I cancel my order after it ships?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "How do I transfer money to another bank?",
            "How do I transfer money from another bank?",
        ),
        (
            HELP_CENTRE_ZH_DATA,
            embeddings.USE_MODEL_NAME,
            "chinese",
            "怎么从个人账户切换到企业账户？",
            "怎么从企业账户切换到个人账户？",
        ),
        (HELP_CENTRE_ZH_DATA, embeddings.USE_MODEL_NAME, "chinese", "可以线上退货吗？", "可以线下退货吗？"),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Is a business account more expensive than a personal account?",
            "Is a personal account more expensive than a business account?",
        ),
        (
            HELP_CENTRE_ZH_DATA,
            embeddings.USE_MODEL_NAME,
            "chinese",
            "企业账户比个人账户贵吗？",
            "个人账户比企业账户贵吗？",
        ),
        (HELP_CENTRE_EN, "all-MiniLM-L6-v2", "english", "How do I hide a post?", "How do I unhide a post?"),
        (HELP_CENTRE_EN, embeddings.USE_MODEL_NAME, "english", "How do I allow pop-ups?", "How do I block pop-ups?"),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "Wie aktiviere ich Benachrichtigungen?",
            "Wie deaktiviere ich Benachrichtigungen?",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "Kann ich die Bestellung vor dem Versand stornieren?",
            "Kann ich die Bestellung nach dem Versand stornieren?",
        ),
        (HELP_CENTRE_OTHER, embeddings.USE_MODEL_NAME, "english", "Wie melde ich mich an?", "Wie melde ich mich ab?"),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "Como ativo as notificações?",
            "Como desativo as notificações?",
        ),
        (HELP_CENTRE_OTHER, embeddings.USE_MODEL_NAME, "english", "ログインできません", "ログアウトできません"),
        (HELP_CENTRE_OTHER, embeddings.USE_MODEL_NAME, "english", "알림을 켜는 방법은?", "알림을 끄는 방법은?"),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "¿El plan Pro es más barato que el plan Equipo?",
            "¿El plan Equipo es más barato que el plan Pro?",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "Wie wechsle ich von einem privaten Konto zu einem Geschäftskonto?",
            "Wie wechsle ich von einem Geschäftskonto zu einem privaten Konto?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Can I merge my old account into my new account?",
            "Can I merge my new account into my old account?",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "発送前に返金できますか？",
            "発送後に返金できますか？",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "Как перевести деньги в другой банк?",
            "Как перевести деньги из другого банка?",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "国内配送の送料はいくらですか？",
            "海外配送の送料はいくらですか？",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "¿Los clientes nuevos tienen descuento?",
            "¿Los clientes actuales tienen descuento?",
        ),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "¿Abren los fines de semana?",
            "¿Abren entre semana?",
        ),
        (HELP_CENTRE_ZH_DATA, embeddings.USE_MODEL_NAME, "chinese", "普通快递几天到？", "加急快递几天到？"),
        # Served before the rule by the multilingual head (p 0.84) and the bundled one (p 0.87).
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "How do I sign up for the newsletter?",
            "How do I sign in to the newsletter?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "How do I sign up for the newsletter?",
            "How do I sign in to the newsletter?",
        ),
        # Served before the rule: by the multilingual head (p 0.75) and by the bundled one (p 0.75).
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "Do the wired headphones have a warranty?",
            "Do the wireless headphones have a warranty?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Do the wired headphones have a warranty?",
            "Do the wireless headphones have a warranty?",
        ),
        # Served before the rule: by the multilingual head (p 0.74, 0.79) and by the bundled one (p 0.97).
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "Can I drop off the keys after hours?",
            "Can I pick up the keys after hours?",
        ),
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "Why is there a gap at the top of the page?",
            "Why is there a gap at the bottom of the page?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "How do I align text to the left?",
            "How do I align text to the right?",
        ),
        # Served before the rule: by the multilingual head (p 0.66) and by the bundled one (p 0.78).
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "Can I sit on the upper deck?",
            "Can I sit on the lower deck?",
        ),
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Is parking available inside the building?",
            "Is parking available outside the building?",
        ),
        # Served before the rule: by the multilingual head (p 0.89, 0.90) and by the bundled one (p 0.83).
        (HELP_CENTRE_EN, embeddings.USE_MODEL_NAME, "english", "What time is check-in?", "What time is check-out?"),
        (
            HELP_CENTRE_OTHER,
            embeddings.USE_MODEL_NAME,
            "english",
            "¿A qué hora es el check-in?",
            "¿A qué hora es el check-out?",
        ),
        (
            HELP_CENTRE_OTHER,
            "all-MiniLM-L6-v2",
            "english",
            "チェックインは何時からですか",
            "チェックアウトは何時からですか",
        ),
    ],
    ids=[
        "english-open-close",
        "english-direction-reversed",
        "english-public-private",
        "chinese-export-import",
        "chinese-before-after",
        "english-before-after",
        "english-before-after-multilingual",
        "english-to-from",
        "chinese-direction-reversed",
        "chinese-online-offline",
        "english-comparison-reversed",
        "chinese-comparison-reversed",
        "english-prefixed-opposite",
        "english-allow-block",
        "german-activate",
        "german-before-after",
        "german-separable-prefix",
        "portuguese-activate",
        "japanese-login",
        "korean-switch-on",
        "spanish-comparison-reversed",
        "german-direction-reversed",
        "english-words-swapped",
        "japanese-before-after",
        "russian-to-from",
        "japanese-domestic-international",
        "spanish-new-existing",
        "spanish-weekends-weekdays",
        "chinese-standard-express",
        "english-sign-up-sign-in",
        "english-sign-up-sign-in-bundled",
        "english-wired-wireless",
        "english-wired-wireless-bundled",
        "english-drop-off-pick-up",
        "english-top-bottom",
        "english-left-right-bundled",
        "english-upper-lower",
        "english-inside-outside-bundled",
        "english-check-in-out",
        "spanish-check-in-out",
        "japanese-check-in-out-bundled",
    ],
)
def test_a_question_about_the_opposite_action_is_never_served_the_first_ones_answer(
    api_client, tenant, services, documents, model, analyzer, question, opposite
):
    """Each pair sits at cosine 0.85-0.997 in its knowledge base's model, and its head called it a duplicate (over its
    cut: the bundled head's 0.73, the multilingual head's 0.65): the opposite was served the first question's
    answer."""
    kb = indexed_kb(tenant, documents=documents, name=f"help-{analyzer}", embedding_model=model, text_analyzer=analyzer)
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, question)
    refused = ask(api_client, conversation_id, opposite)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] in ("opposite actions", "words swapped"), refused["dedup"]


@pytest.mark.parametrize(
    ("documents", "model", "analyzer", "question", "swapped"),
    [
        (
            HELP_CENTRE_EN,
            "all-MiniLM-L6-v2",
            "english",
            "Can my manager see my calendar?",
            "Can I see my manager's calendar?",
        ),
        (
            HELP_CENTRE_EN,
            embeddings.USE_MODEL_NAME,
            "english",
            "Can admins see my messages?",
            "Can I see the admins' messages?",
        ),
        (
            HELP_CENTRE_ZH_DATA,
            embeddings.USE_MODEL_NAME,
            "chinese",
            "管理员能看到我的消息吗？",
            "我能看到管理员的消息吗？",
        ),
    ],
    ids=["bundled", "multilingual", "chinese"],
)
def test_a_question_that_swaps_who_acts_on_whose_is_never_served_the_first_ones_answer(
    api_client, tenant, services, documents, model, analyzer, question, swapped
):
    """Each pair sits at cosine 0.96-0.97 in its model and its head called it a duplicate: the swap was served the
    first question's answer."""
    kb = indexed_kb(tenant, documents=documents, name="owners", embedding_model=model, text_analyzer=analyzer)
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, question)
    refused = ask(api_client, conversation_id, swapped)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == "owners swapped", refused["dedup"]


HELP_CENTRE_SEATS = {
    "seats-en": ["The Team plan includes up to ten users; each extra user is billed monthly."],
    "seats-es": ["El plan Equipo incluye hasta diez usuarios; cada usuario adicional se factura al mes."],
    "seats-de": ["Der Team-Tarif umfasst bis zu zehn Benutzer; jeder weitere wird monatlich berechnet."],
    "seats-zh": ["团队版最多包含十个用户；每增加一个用户，按月计费。"],
}


@pytest.mark.parametrize(
    ("model", "question", "other_count", "in_digits"),
    [
        (
            "all-MiniLM-L6-v2",
            "Can I add five users on the Team plan?",
            "Can I add ten users on the Team plan?",
            "Can I add 5 users on the Team plan?",
        ),
        (
            embeddings.USE_MODEL_NAME,
            "¿Puedo tener dos cuentas?",
            "¿Puedo tener tres cuentas?",
            "¿Puedo tener 2 cuentas?",
        ),
        (
            embeddings.USE_MODEL_NAME,
            "Kann ich zwei Konten haben?",
            "Kann ich drei Konten haben?",
            "Kann ich 2 Konten haben?",
        ),
    ],
    ids=["english", "spanish", "german"],
)
def test_a_count_written_as_a_word_is_a_number(api_client, tenant, services, model, question, other_count, in_digits):
    """Counts such as "two accounts" and "three accounts" sit 0.87-0.91 apart and their heads called them
    duplicates: the other count was served the first one's answer. Read by value, another count is refused and the
    same count in digits is still a repeat."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_SEATS, name="seats", embedding_model=model)
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, question)
    refused = ask(api_client, conversation_id, other_count)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == "numbers differ", refused["dedup"]
    fresh = start(api_client, kb)
    first = ask(api_client, fresh, question)
    served = ask(api_client, fresh, in_digits)
    assert served["dedup"]["action"] == "served_cached", served["dedup"]
    assert served["dedup"]["matched_turn_id"] == first["turn_id"]


@pytest.mark.parametrize(
    ("model", "question", "other_period", "reworded"),
    [
        (
            "all-MiniLM-L6-v2",
            "How much does the Team plan cost per month?",
            "How much does the Team plan cost per year?",
            "What does the Team plan cost each month?",
        ),
        (
            embeddings.USE_MODEL_NAME,
            "How much does the Team plan cost per month?",
            "How much does the Team plan cost per year?",
            "What does the Team plan cost each month?",
        ),
        (
            embeddings.USE_MODEL_NAME,
            "¿Cuánto cuesta el plan Equipo al mes?",
            "¿Cuánto cuesta el plan Equipo al año?",
            "¿Qué precio tiene el plan Equipo cada mes?",
        ),
        (
            embeddings.USE_MODEL_NAME,
            "Wie viel kostet der Team-Tarif pro Monat?",
            "Wie viel kostet der Team-Tarif pro Jahr?",
            "Was kostet der Team-Tarif monatlich?",
        ),
        (embeddings.USE_MODEL_NAME, "团队版每月多少钱", "团队版每年多少钱", "团队版包月要多少钱"),
    ],
    ids=["english", "english-multilingual", "spanish", "german", "chinese"],
)
def test_a_question_about_another_period_is_never_served_the_first_ones_answer(
    api_client, tenant, services, model, question, other_period, reworded
):
    """A price per month and per year sit 0.87-0.93 apart in English, Spanish, German and Chinese, and both heads
    served the second question the first one's answer in the first three. The multilingual head held the Chinese pair
    back by its probability alone, under a cut a tenant's verifier may lower."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_SEATS, name="seats", embedding_model=model)
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, question)
    refused = ask(api_client, conversation_id, other_period)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == "periods differ", refused["dedup"]
    served = ask(api_client, conversation_id, reworded)
    assert served["dedup"]["action"] == "served_cached", served["dedup"]
    assert served["dedup"]["matched_turn_id"] == first["turn_id"]


# Help centres whose answers depend on a tier, a state, a day, a language, a party or the group of people they are for
# (`conversations.dedup.kinds`).
HELP_CENTRE_KINDS = {
    "tiers-en": [
        "Personal accounts get one debit card. Business accounts get up to ten cards, one per employee. "
        "The Free plan stores 5 GB; the Pro plan stores 1 TB."
    ],
    "tiers-zh": ["个人用户可以开具增值税普通发票；企业用户可以开具增值税专用发票，需要先完成企业认证。"],
    "tiers-ja": ["無料プランの保存容量は5GBです。有料プランの保存容量は1TBです。"],
    "states-en": [
        "Orders can be cancelled until they have shipped. Once an order has been delivered, start a return instead."
    ],
    "states-zh": ["订单发货前可以直接取消；已发货的订单需要拒收；已签收的订单请在七天内申请退货。"],
    "states-es": ["Un pedido se puede cancelar hasta que se envía. Un pedido entregado se devuelve en 30 días."],
    "hours-en": [
        "The store is open Monday to Saturday from 9 am to 6 pm and closed on Sunday. "
        "The printed manual comes in English, German and Spanish."
    ],
    "hours-zh": ["门店周一至周六营业，周日休息。客服支持中文和英文。"],
    "groups-en": [
        "Running shoes come in men's and women's sizes. Full-time employees get 25 days of paid leave a year; "
        "part-time employees get leave in proportion to their hours."
    ],
}
MULTILINGUAL = embeddings.USE_MODEL_NAME


@pytest.mark.parametrize(
    ("model", "analyzer", "question", "other", "reason"),
    [
        # The bundled head refused this one (p 0.30); the multilingual head served every other pair before its rule.
        (
            "all-MiniLM-L6-v2",
            "english",
            "How many cards does a personal account get?",
            "How many cards does a business account get?",
            "tiers differ",
        ),
        (MULTILINGUAL, "chinese", "个人用户可以开发票吗", "企业用户可以开发票吗", "tiers differ"),
        (MULTILINGUAL, "english", "無料プランの保存容量は？", "有料プランの保存容量は？", "tiers differ"),
        (
            "all-MiniLM-L6-v2",
            "english",
            "Can I still cancel my order after it has shipped?",
            "Can I still cancel my order after it has been delivered?",
            "states differ",
        ),
        (MULTILINGUAL, "chinese", "已发货的订单还能取消吗", "已签收的订单还能取消吗", "states differ"),
        # The multilingual head refused this one at p 0.65, a hair under its cut.
        (
            MULTILINGUAL,
            "english",
            "¿Se puede cancelar un pedido enviado?",
            "¿Se puede cancelar un pedido entregado?",
            "states differ",
        ),
        (MULTILINGUAL, "english", "Are you open on Monday?", "Are you open on Sunday?", "days differ"),
        (MULTILINGUAL, "chinese", "周一营业吗", "周日营业吗", "days differ"),
        (
            MULTILINGUAL,
            "english",
            "Can I get the manual in German?",
            "Can I get the manual in English?",
            "languages differ",
        ),
        (MULTILINGUAL, "chinese", "今天下单今天能送到吗", "今天下单明天能送到吗", "days differ"),
        (
            MULTILINGUAL,
            "english",
            "Who pays for repairs, the landlord?",
            "Who pays for repairs, the tenant?",
            "roles differ",
        ),
        (
            MULTILINGUAL,
            "english",
            "Can I cancel the booking the day before?",
            "Can I cancel the booking on the day?",
            "days differ",
        ),
        # Both served before the rule: the bundled head at p 0.73, the multilingual one at p 0.79.
        (
            "all-MiniLM-L6-v2",
            "english",
            "Do you sell running shoes for men?",
            "Do you sell running shoes for women?",
            "groups differ",
        ),
        (
            MULTILINGUAL,
            "english",
            "Do part-time employees get paid leave?",
            "Do full-time employees get paid leave?",
            "groups differ",
        ),
    ],
    ids=[
        "tiers-english",
        "tiers-chinese",
        "tiers-japanese",
        "states-english",
        "states-chinese",
        "states-spanish",
        "days-english",
        "days-chinese",
        "languages-english",
        "today-tomorrow-chinese",
        "roles-english",
        "day-before-english",
        "gender-english",
        "work-hours-english",
    ],
)
def test_a_question_about_another_tier_state_day_language_party_or_group_is_never_served_the_first_ones_answer(
    api_client, tenant, services, model, analyzer, question, other, reason
):
    """Personal and business accounts, shipped and delivered orders, Monday and Sunday, a manual in German and in
    English, a landlord and a tenant, men's and women's shoes sit as close as a rewording in their model, and a head
    served most of these pairs the first question's answer. The answer depends on the kind, so a rule says it
    whatever a head's weights."""
    kb = indexed_kb(
        tenant, documents=HELP_CENTRE_KINDS, name=f"kinds-{analyzer}", embedding_model=model, text_analyzer=analyzer
    )
    conversation_id = start(api_client, kb)
    ask(api_client, conversation_id, question)
    refused = ask(api_client, conversation_id, other)
    assert refused["dedup"]["action"] != "served_cached", refused["dedup"]
    assert refused["dedup"]["reason"] == reason, refused["dedup"]


def test_english_chat_formulas_are_small_talk_and_show_me_again_repeats_the_question_before_them(
    api_client, tenant, services
):
    """ "thx!!" sits 0.5-0.73 from every example of thanks, under the floor: it was a question, searched for, and the
    topic that "say again?" (itself a question then) would repeat. Read by rule, both are built-ins."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_EN, name="help-english")
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I request a refund?")
    thanks = ask(api_client, conversation_id, "thx!!")
    assert (thanks["dedup"]["intent"], thanks["dedup"]["action"]) == ("thanks", "smalltalk"), thanks["dedup"]
    again = ask(api_client, conversation_id, "say again?")
    assert again["dedup"]["intent"] == "repeat", again["dedup"]
    assert [s["chunk_id"] for s in again["sources"]] == [s["chunk_id"] for s in first["sources"]]


def test_a_request_to_explain_or_show_the_answer_again_in_a_sentence_of_its_own_is_the_built_in_intent(
    api_client, tenant, services
):
    """ "Can you explain that differently?" and "could you repeat what you just said?" sit under the floor of every
    example: as questions they were searched for their own words (and "explain that differently" found nothing to
    quote). Read by their words, both are about the last answer: elaborate skips the stored answers and answers the
    question before it afresh, repeat shows its passages again. A question about a topic in the same words stays one."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_EN, name="help-english")
    conversation_id = start(api_client, kb)
    first = ask(api_client, conversation_id, "How do I request a refund?")
    differently = ask(api_client, conversation_id, "Can you explain that differently?")
    assert differently["dedup"]["intent"] == "elaborate", differently["dedup"]
    assert (differently["dedup"]["action"], differently["dedup"]["reason"]) == ("bypassed", "intent elaborate")
    assert differently["sources"], differently
    again = ask(api_client, conversation_id, "sorry, could you repeat what you just said?")
    assert again["dedup"]["intent"] == "repeat", again["dedup"]
    assert [s["chunk_id"] for s in again["sources"]] == [s["chunk_id"] for s in first["sources"]]
    topic = ask(api_client, conversation_id, "Can you explain when the invoice is issued?")
    assert topic["dedup"]["intent"] == "other", topic["dedup"]


@pytest.mark.parametrize(
    ("model", "analyzer", "messages"),
    [
        (
            embeddings.USE_MODEL_NAME,
            "chinese",
            [("谢谢", "不客气。还有什么可以帮你的吗？"), ("謝謝你", "不客氣。還有什麼可以幫你的嗎？")],
        ),
        (embeddings.USE_MODEL_NAME, "english", [("muchas gracias", "De nada. ¿Algo más?")]),
        ("all-MiniLM-L6-v2", "english", [("thx!!", "You're welcome. Anything else?")]),
    ],
    ids=["chinese", "spanish", "english"],
)
def test_the_platforms_own_replies_are_in_the_language_the_user_wrote(
    api_client, tenant, services, model, analyzer, messages
):
    """A Chinese "谢谢" was answered "You're welcome. Anything else?", and a Chinese question the help centre does not
    cover "I found nothing in the knowledge base that answers this."."""
    kb = indexed_kb(tenant, documents=HELP_CENTRE_ZH, name="help", embedding_model=model, text_analyzer=analyzer)
    conversation_id = start(api_client, kb)
    for message, expected in messages:
        body = ask(api_client, conversation_id, message)
        assert (body["dedup"]["action"], body["answer"]) == ("smalltalk", expected), body
