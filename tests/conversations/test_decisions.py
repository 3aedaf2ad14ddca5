"""The pure decisions of the turn pipeline, tested directly (no database, no model)."""

import functools

import numpy as np
import pytest

from conversations.dedup import decisions as d
from conversations.dedup import question_pairs as qp
from retrieval.question_index import question_collection_name, question_filter_build
from retrieval.vectorstore import filter_build


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


# --- plan -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "intent", "force", "scope", "allow", "expected"),
    [
        ("normal", "other", False, "session", ("other",), (False, True, True, "")),
        ("smalltalk", "greeting", False, "session", ("other",), (True, False, False, "")),
        ("smalltalk", "greeting", True, "tenant", ("greeting",), (True, False, False, "")),
        ("repeat", "repeat", False, "session", ("other",), (False, False, False, "intent repeat")),
        ("elaborate", "elaborate", False, "session", ("other",), (False, False, True, "intent elaborate")),
        ("normal", "other", True, "session", ("other",), (False, False, True, "force_refresh")),
        ("normal", "billing", False, "session", ("other",), (False, False, True, "intent billing not allowlisted")),
        ("normal", "billing", False, "session", ("other", "billing"), (False, True, True, "")),
        ("normal", "other", False, "off", ("other",), (False, False, True, "")),
    ],
)
def test_turn_plan(behaviour, intent, force, scope, allow, expected):
    policy = d.PolicyView(scope=scope, allowlisted_intents=allow)
    plan = d.turn_plan(policy=policy, intent=intent, behaviour=behaviour, force_refresh=force)
    assert (plan.smalltalk, plan.check_duplicates, plan.exclusion, plan.bypass_reason) == expected


def test_turn_plan_exclusion_disabled_by_policy():
    plan = d.turn_plan(
        policy=d.PolicyView(exclusion_enabled=False), intent="other", behaviour="normal", force_refresh=False
    )
    assert plan.exclusion is False and plan.check_duplicates is True


# --- window maths ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("next_turn", "window", "first"),
    [(1, 5, 1), (2, 5, 1), (6, 5, 1), (7, 5, 2), (100, 1, 99), (100, 100, 1), (101, 100, 1), (102, 100, 2)],
)
def test_window_first_turn(next_turn, window, first):
    assert d.window_first_turn(next_turn_number=next_turn, window=window) == first


def test_window_must_be_positive():
    with pytest.raises(ValueError):
        d.window_first_turn(next_turn_number=3, window=0)


def test_excluded_ids_keep_only_window_and_granularity():
    consumed = [
        d.ConsumedRef("doc", 10, 1),
        d.ConsumedRef("doc", 11, 2),
        d.ConsumedRef("doc", 12, 6),
        d.ConsumedRef("chunk", 500, 6),
        d.ConsumedRef("doc", 12, 6),
        d.ConsumedRef("doc", 13, 7),  # a turn not yet before the next one (concurrent): never excluded
    ]
    # next turn 7, window 5 -> turns 2..6
    assert d.excluded_ids(consumed=consumed, granularity="doc", next_turn_number=7, window=5) == [11, 12]
    assert d.excluded_ids(consumed=consumed, granularity="chunk", next_turn_number=7, window=5) == [500]
    assert d.excluded_ids(consumed=consumed, granularity="doc", next_turn_number=7, window=1) == [12]
    assert d.excluded_ids(consumed=[], granularity="doc", next_turn_number=1, window=5) == []


# --- relax rule ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "min_results", "wanted", "relaxes"),
    [(0, 3, 5, True), (2, 3, 5, True), (3, 3, 5, False), (5, 3, 5, False), (4, 10, 5, True), (5, 10, 5, False)],
)
def test_exclusion_relaxes(count, min_results, wanted, relaxes):
    assert d.exclusion_relaxes(result_count=count, min_results=min_results, wanted=wanted) is relaxes


def test_min_results_zero_never_relaxes():
    assert d.exclusion_relaxes(result_count=0, min_results=0, wanted=5) is False


def test_relaxed_merge_keeps_novel_first_then_fills_without_repeats():
    novel = [("d7", 0.5)]
    full = [("d1", 0.9), ("d7", 0.5), ("d2", 0.8), ("d3", 0.7)]
    merged = d.relaxed_merge(excluded_results=novel, full_results=full, key=lambda r: r[0], limit=3)
    assert merged == [("d7", 0.5), ("d1", 0.9), ("d2", 0.8)]


# --- filter building and quoting -----------------------------------------------------------------------------------


def test_filter_names_tenant_and_leaves_out_empty_lists():
    assert filter_build(tenant_id=3, knowledge_base_id=9, exclude_document_ids=[]) == (
        'tenant_id == "t3" and knowledge_base_id == 9'
    )
    assert filter_build(tenant_id=3, knowledge_base_id=9, exclude_document_ids=[5, 2, 5]) == (
        'tenant_id == "t3" and knowledge_base_id == 9 and doc_id not in [2, 5]'
    )
    assert filter_build(tenant_id=3, exclude_chunk_ids=[8]).endswith("chunk_id not in [8]")


def test_question_filter_names_tenant_first_and_quotes_values():
    expression = question_filter_build(tenant_id=4, knowledge_base_id=2, created_after=1700000000, turn_ids=[9, 3])
    assert expression == (
        'tenant_id == "t4" and knowledge_base_id == 2 and created_ts >= 1700000000 and turn_id in [3, 9]'
    )
    assert question_filter_build(tenant_id=4, turn_ids=[]) == 'tenant_id == "t4"'
    with pytest.raises(ValueError):
        question_filter_build(tenant_id=4, turn_ids=["1 or true"])


# --- intents ----------------------------------------------------------------------------------------------------------


def test_intent_is_nearest_example_above_floor_else_other():
    intents = [
        d.IntentExamples("greeting", "smalltalk", np.stack([unit(1, 0, 0), unit(1, 0.1, 0)])),
        d.IntentExamples("repeat", "repeat", np.stack([unit(0, 1, 0)])),
        d.IntentExamples("empty", "normal", np.zeros((0, 3), dtype=np.float32)),
    ]
    # English text: the vector alone decides.
    classify = functools.partial(d.intent_classify, question="some question", intents=intents, floor=0.8)
    assert classify(question_vector=unit(1, 0.05, 0))[:2] == ("greeting", "smalltalk")
    assert classify(question_vector=unit(0.1, 1, 0))[:2] == ("repeat", "repeat")
    assert classify(question_vector=unit(0, 0, 1))[:2] == ("other", "normal")
    assert classify(question_vector=unit(1, 1, 0))[:2] == ("other", "normal")


def test_names_topic_follows_the_intent_and_its_behaviour():
    intents = [
        d.IntentExamples("greeting", "smalltalk", np.stack([unit(1, 0, 0), unit(1, 0.1, 0)])),
        d.IntentExamples("repeat", "repeat", np.stack([unit(0, 1, 0)])),
        d.IntentExamples("pricing", "normal", np.stack([unit(0, 0.9, 0.44)])),
        d.IntentExamples("empty", "normal", np.zeros((0, 3), dtype=np.float32)),
    ]
    vectors = [
        unit(1, 0.05, 0),  # greeting: small talk
        unit(0.1, 1, 0),  # repeat
        unit(0, 0, 1),  # no intent above the floor: a question of its own
        unit(0, 0.92, 0.4),  # nearest is the normal "pricing" example, though "repeat" is above the floor too
        unit(1, 0, 0, 0),  # another model's vector: cannot be classified
    ]
    assert d.names_topic(vectors=vectors, intents=intents, floor=0.8) == [False, False, True, True, True]
    for vector, named in zip(vectors[:4], [False, False, True, True], strict=True):
        behaviour = d.intent_classify(question="", question_vector=vector, intents=intents, floor=0.8)[1]
        assert (behaviour not in d.TOPICLESS_BEHAVIOURS) == named
    assert d.names_topic(vectors=[], intents=intents) == []
    assert d.names_topic(vectors=[unit(1, 0, 0)], intents=[]) == [True]


def test_shipped_phrasings_name_their_intent_at_their_own_floor_for_text_that_is_not_chinese():
    """The built-ins' phrasings in the multilingual model's other languages reach at PHRASE_FLOOR, the tenant's own
    examples at the policy's floor; the nearest of all decides; Chinese text, which the rules read, is never compared
    with the phrasings (Japanese text is)."""
    phrase_reach = d.PHRASE_FLOOR + 0.02  # cosine of the question with the repeat phrasing
    near_phrase = np.array([0.0, phrase_reach, np.sqrt(1 - phrase_reach**2)])
    intents = [
        d.IntentExamples("greeting", "smalltalk", np.stack([unit(1, 0, 0)]), phrases=np.stack([unit(1, 0.1, 0)])),
        d.IntentExamples("repeat", "repeat", np.stack([unit(0, 0, 1)]), phrases=np.stack([unit(0, 1, 0)])),
    ]
    classify = functools.partial(d.intent_classify, question_vector=near_phrase, intents=intents, floor=0.8)
    assert classify(question="다시 보여 주세요")[:2] == ("repeat", "repeat")
    assert classify(question="もう一度見せてください")[:2] == ("repeat", "repeat")
    assert classify(question="请再次致电")[:2] == ("other", "normal")  # Chinese: the phrasings are not read
    without = [d.IntentExamples(i.name, i.behaviour, i.vectors) for i in intents]
    assert d.intent_classify(question="다시 보여 주세요", question_vector=near_phrase, intents=without, floor=0.8)[
        0
    ] == ("other")
    # Under its floor a phrasing names nothing, even as the nearest.
    under = np.array([0.0, d.PHRASE_FLOOR - 0.02, np.sqrt(1 - (d.PHRASE_FLOOR - 0.02) ** 2)])
    assert d.intent_classify(question="다시", question_vector=under, intents=intents, floor=0.8)[0] == "other"
    # names_topic reads them alike, for the questions whose text it is given.
    assert d.names_topic(
        vectors=[near_phrase, near_phrase, near_phrase],
        intents=intents,
        floor=0.8,
        questions=["다시 보여 주세요", "请再次致电", "もう一度見せてください"],
    ) == [False, True, False]
    assert d.names_topic(vectors=[near_phrase], intents=intents, floor=0.8) == [True]


# --- agreement and follow-ups --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        ("How do I reset my password?", "How can I reset my password?", ""),
        ("Pricing for the 2016 plan?", "Pricing for the 2017 plan?", "numbers differ"),
        ("Pricing for the 2016 plan?", "Pricing for the plan?", "numbers differ"),
        ("Pricing for the 2,016 plan?", "Pricing for the 2016 plan?", ""),
        ("Can I export reports to PDF?", "Can't I export reports to PDF?", "negation differs"),
        ("Can I export reports to PDF?", "Is there no way to export reports to PDF?", "negation differs"),
        # contractions typed without the apostrophe still say no
        ("Why do I get emails from you?", "why dont I get emails from you", "negation differs"),
        ("I can log in on my phone", "I cant log in on my phone", "negation differs"),
        ("Why doesnt my card work?", "Why doesn't my card work?", ""),
        ("Can't log in after the update", "Unable to log in after the update", ""),
        ("How do I install Python on Windows?", "How do I install Java on Linux?", ""),  # the head's job
        # one question names an action, the other its opposite
        ("How do I install Python on Windows?", "How do I uninstall Python on Windows?", "opposite actions"),
        ("What time does the store open on Sunday?", "When does the store close on Sunday?", "opposite actions"),
        ("How do I log in?", "How can I log out?", "opposite actions"),
        ("How do I turn on notifications?", "How do I turn off notifications?", "opposite actions"),
        ("How do I upload a file?", "Where do I download a file?", "opposite actions"),
        ("What is the first day to apply?", "What is the last day to apply?", "opposite actions"),
        ("What is the best plan for a small team?", "What is the worst plan for a small team?", "opposite actions"),
        ("Which plan has the lowest fees?", "Which plan has the highest fees?", "opposite actions"),
        ("How long does a deposit take?", "How long does a withdrawal take?", "opposite actions"),
        ("Does the Pro plan cost more?", "Does the Pro plan cost less?", "opposite actions"),
        ("What time is check-in at the resort?", "What time is checkout at the resort?", "opposite actions"),
        ("Can I check in online for my flight?", "Can I check out online?", "opposite actions"),
        ("Can I merge my orders?", "Can I split my orders?", "opposite actions"),
        ("How do I pause my ads?", "How do I resume my ads?", "opposite actions"),
        ("Who can approve a purchase order?", "Who can decline a purchase order?", "opposite actions"),
        ("Can I extend the deadline?", "Can I shorten the deadline?", "opposite actions"),
        ("How do I update the plugin?", "How do I roll back the plugin?", "opposite actions"),
        ("¿Cuándo es el check-in?", "¿Cuándo es el check-out?", "opposite actions"),
        ("Wann kann ich einchecken?", "Wann kann ich auschecken?", "opposite actions"),
        ("チェックインは何時ですか", "チェックアウトは何時ですか", "opposite actions"),
        ("체크인 시간이 궁금해요", "체크아웃 시간이 궁금해요", "opposite actions"),
        ("Is checking my balance free?", "Is checking out free?", ""),  # "checking" is no check-in
        ("How do I restart my paused plan?", "How do I resume my plan?", ""),  # a paused plan is resumed
        ("Can I merge two PDFs into one?", "Can I combine two PDFs into one?", ""),
        # before and after the same event or date, the event in another form of its word; around different events,
        # or naming both sides, no conflict (QQP's labelled duplicates ask so)
        ("Can I get a refund before shipping?", "Can I get a refund after shipping?", "opposite actions"),
        ("Can I cancel my order before it ships?", "Can I cancel my order after it has shipped?", "opposite actions"),
        ("Is my card charged prior to delivery?", "Is my card charged after delivery?", "opposite actions"),
        ("Can I cancel my order before it ships?", "Is it possible to cancel an order prior to shipping?", ""),
        ("Is my card charged before or after delivery?", "Is my card charged after delivery?", ""),
        ("How many days before my period can I get pregnant?", "Can I get pregnant just after it ends?", ""),
        ("What happened in India before 1947?", "What happened in India after 1947?", "opposite actions"),
        ("What happened in India before 1947?", "What happened in India after 1950?", "numbers differ"),
        # a move to a thing against the same move from it; "to" before a verb, "different from", different things,
        # or both sides named: no conflict
        ("How do I transfer money to another bank?", "How do I transfer money from another bank?", "opposite actions"),
        ("How do I move photos to my SD card?", "How do I move photos from my SD card?", "opposite actions"),
        ("Can I switch to the annual plan?", "Is it possible to switch from the annual plan?", "opposite actions"),
        ("Can I transfer my number to another carrier?", "Is it possible to port my number to a new carrier?", ""),
        ("How do I sync files from Google Drive?", "How can I get my Google Drive files synced to my laptop?", ""),
        ("How is a lease different to a loan?", "How is a lease different from a loan?", ""),
        ("Can I move money to and from my savings?", "Can I move money from my savings?", ""),
        ("What are the pros and cons of the Pro plan?", "What are the advantages of the Pro plan?", ""),
        ("How do I move money from PayPal to my bank?", "How can I send money to my bank from PayPal?", ""),
        ("How do I logout?", "How do I log out?", ""),  # one side, two spellings
        ("How do I turn on dark mode?", "How do I switch on dark mode?", ""),
        ("How do I open or close an account?", "How do I close an account?", ""),  # both named on one side
        ("Can I add and remove users?", "How do I remove users?", ""),
        ("How long before my refund arrives?", "How long after approval does my refund arrive?", ""),
        ("How do I vote on Proposition 61?", "How do I vote on Proposition 62?", "numbers differ"),
        ("Is the iPhone 6 waterproof?", "Is the iPhone 7 waterproof?", "numbers differ"),
        ("Is the 5GB limit per user?", "Is the 10GB limit per user?", "numbers differ"),
        ("How do I turn on 2FA?", "How do I enable 2FA?", ""),  # "2FA" names a thing, it is no quantity
        ("Are you open at 9:00 on Sundays?", "Are you open at 9am on Sundays?", ""),
        ("Does the shop open at 10:30?", "Does the shop open at 10.30?", ""),
        ("Does the shop open at 10:30?", "Does the shop open at 10?", "numbers differ"),
        ("Is the fee $5.00 a month?", "Is the fee $5 a month?", ""),
        ("17：00前还款算逾期吗", "17点前还款算逾期吗", ""),
        ("Can I have two accounts?", "Can I have three accounts?", "numbers differ"),
        ("Can I add 5 users on the Team plan?", "Can I add five users on the Team plan?", ""),
        ("Can I buy two one-way tickets?", "Can I buy 2 one-way tickets?", ""),  # "two one" is 2, not 3
        ("¿Puedo tener dos cuentas?", "¿Puedo tener tres cuentas?", "numbers differ"),
        ("¿Puedo tener 2 cuentas?", "¿Puedo tener dos cuentas?", ""),
        ("Kann ich zwei Konten haben?", "Kann ich drei Konten haben?", "numbers differ"),
        ("계정을 두 개 만들 수 있나요?", "계정을 세 개 만들 수 있나요?", "numbers differ"),
        ("환불은 삼 일 걸리나요?", "환불은 오 일 걸리나요?", "numbers differ"),
        ("환불은 삼 일 걸리나요?", "환불이 3일 걸리나요?", ""),
        ("Tôi có thể tạo hai tài khoản không?", "Tôi có thể tạo ba tài khoản không?", "numbers differ"),
        ("Bisakah saya membuat dua akun?", "Bisakah saya membuat tiga akun?", "numbers differ"),
        (
            "Можно ли вернуть товар в течение семи дней?",
            "Можно ли вернуть товар в течение трёх дней?",
            "numbers differ",
        ),
        ("Which one should I pick?", "Which plan should I pick?", ""),
        ("Is the Pro plan billed monthly?", "Is the Pro plan billed annually?", "periods differ"),
        ("How do I make my project public?", "How do I make my project private?", "opposite actions"),
        ("Do new customers get a discount?", "Do existing customers get a discount?", "opposite actions"),
        ("Can I use the app offline?", "Can I use the app online?", "opposite actions"),
        ("Can I get a refund after 30 days?", "Can I get a refund within 30 days?", "opposite actions"),
        ("Is the course free for students under 18?", "Is the course free for students over 18?", "opposite actions"),
        ("Is shipping free for orders above $50?", "Is shipping free for orders below $50?", "opposite actions"),
        ("Does the price include tax?", "Does the price exclude tax?", "opposite actions"),
        ("Can the buyer cancel the order?", "Can the seller cancel the order?", "opposite actions"),
        ("Can I get a refund within 30 days?", "Am I eligible for a refund within 30 days of purchase?", ""),
        # a word and its prefixed form written apart; weekdays / weekends, one way / round trip, online / in store
        ("Is this ticket refundable?", "Is this ticket non-refundable?", "opposite actions"),
        ("Are tickets cheaper during peak hours?", "Are tickets cheaper during off-peak hours?", "opposite actions"),
        ("How do I turn off notifications?", "How do I turn off all notifications?", ""),  # "off" leads no "peak"
        ("Is this ticket non-refundable?", "Is this ticket non refundable?", ""),
        ("Are fares cheaper on weekdays?", "Are fares cheaper on weekends?", "opposite actions"),
        ("Are fares cheaper on weekends?", "Are fares cheaper on Saturday and Sunday?", ""),
        ("Is a one-way ticket refundable?", "Is a round-trip ticket refundable?", "opposite actions"),
        ("How long does standard shipping take?", "How long does express shipping take?", "opposite actions"),
        ("How fast is express shipping?", "How quickly does express delivery arrive?", ""),
        ("Is a round trip cheaper than two one-way tickets?", "Is a return ticket cheaper than two singles?", ""),
        ("Can I return an item bought in store?", "Can I return an item bought online?", "opposite actions"),
        ("Can I return an online order in store?", "Can I bring an online order back to a shop?", ""),
        # A move the other way round, in either word order; the same move written the other way is one question.
        (
            "Can I switch from a personal account to a business account?",
            "Can I switch from a business account to a personal account?",
            "opposite actions",
        ),
        (
            "How do I move files from Dropbox to Drive?",
            "How do I move files to Dropbox from Drive?",
            "opposite actions",
        ),
        ("How do I move files from Dropbox to Drive?", "How do I move files to Drive from Dropbox?", ""),
        # Two things compared the other way round; the same comparison in other words is one question.
        (
            "Is the Pro plan cheaper than the Team plan?",
            "Is the Team plan cheaper than the Pro plan?",
            "opposite actions",
        ),
        (
            "Is it cheaper to pay annually than monthly?",
            "Is it cheaper to pay monthly than annually?",
            "opposite actions",
        ),
        ("Is the Pro plan cheaper than the Team plan?", "Is the Pro plan less expensive than the Team plan?", ""),
        ("Is Netflix cheaper than Hulu?", "Is Hulu more expensive than Netflix?", ""),
        ("Is Netflix cheaper than Hulu?", "Which is cheaper, Netflix or Hulu?", ""),
        # One word apart, the one the other with an opposing prefix; not a word the other writes as two, nor "re".
        ("How do I hide a post?", "How do I unhide a post?", "opposite actions"),
        ("Is the feature available on Android?", "Is the feature unavailable on Android?", "opposite actions"),
        ("How do I make my profile visible?", "How do I make my profile invisible?", "opposite actions"),
        ("Why was my comment approved?", "Why was my comment disapproved?", "opposite actions"),
        ("Is there parking in front of the store?", "Is there parking infront of the store?", ""),
        ("How do I install the app?", "How do I reinstall the app?", ""),
        ("How do I hide a post?", "How do I unhide a post on my timeline?", ""),  # more than one word apart
        ("How do I allow pop-ups?", "How do I block pop-ups?", "opposite actions"),
        ("Is the free plan limited to 3 projects?", "Is the paid plan limited to 3 projects?", "opposite actions"),
        ("How do I turn the volume up?", "How do I turn the volume down?", "opposite actions"),
        ("How do I scroll up in a chat?", "How do I scroll down in a chat?", "opposite actions"),
        ("How do I zoom in on the map?", "How do I zoom out on the map?", "opposite actions"),
        ("Can I share files with internal users?", "Can I share files with external users?", "opposite actions"),
        ("How do I move a row up in the table?", "How do I move a row down in the table?", "opposite actions"),
        ("Why did the app break down?", "Why did the app break?", ""),  # "down" alone is no side
        ("How do I move my data from the app to the website?", "How do I move data from the app?", ""),
        ("Do you offer daily backups?", "Do you offer weekly backups?", "periods differ"),
        ("Can I get a refund after a week?", "Can I get a refund after a year?", "periods differ"),
        ("Can I pay monthly or annually?", "Can I pay annually?", ""),  # one period shared
        ("¿Cuánto cuesta el plan Equipo al mes?", "¿Cuánto cuesta el plan Equipo al año?", "periods differ"),
        ("Wird der Pro-Tarif monatlich abgerechnet?", "Wird der Pro-Tarif jährlich abgerechnet?", "periods differ"),
        ("Сколько стоит тариф в месяц?", "Сколько стоит тариф в год?", "periods differ"),
        ("Wie viel kostet der Team-Tarif pro Monat?", "Was kostet der Team-Tarif monatlich?", ""),
        ("Où sont mes factures ?", "Où sont mes factures annuelles ?", ""),  # French "mes" is "my"
        ("How much is the Team plan per month?", "What does the Team plan cost monthly?", ""),
        ("How much is the Team plan?", "How much is the Team plan per month?", ""),  # one side names none
        # Plan tiers and kinds of account holder, in the languages users write; words for one kind read as one.
        ("Does the Team plan include SSO?", "Does the Enterprise plan include SSO?", "tiers differ"),
        ("How do I close a personal account?", "How do I close a business account?", "tiers differ"),
        ("个人用户能开专票吗", "企业用户能开专票吗", "tiers differ"),
        ("基础版能导出Excel吗", "高级版能导出Excel吗", "tiers differ"),
        ("個人アカウントの料金は？", "法人アカウントの料金は？", "tiers differ"),
        ("무료 플랜에 광고가 있나요?", "유료 플랜에 광고가 있나요?", "tiers differ"),
        ("¿Cómo abro una cuenta personal?", "¿Cómo abro una cuenta empresarial?", "tiers differ"),
        ("Wie kündige ich mein Privatkonto?", "Wie kündige ich mein Geschäftskonto?", "tiers differ"),
        ("Какая комиссия для физических лиц?", "Какая комиссия для юридических лиц?", "tiers differ"),
        ("How do I close my business account?", "How do I close my company account?", ""),
        ("公司账户怎么开户", "企业账户怎么开户", ""),
        ("기업 회원은 어떻게 가입하나요?", "법인 회원 가입 방법", ""),
        ("Comment fermer un compte pro ?", "Comment fermer un compte professionnel ?", ""),
        ("Can I move from the Basic plan to the Pro plan?", "What does the Pro plan add?", ""),  # one tier shared
        ("What are business days?", "What are personal days?", ""),  # no plan or account qualified
        ("How do I add team members?", "How do I add members to the Pro plan?", ""),
        ("一个人能开几个账户", "一个企业账户能开几个子账户", ""),  # 一个人 counts a person
        # One thing in another state of its course; words for one state read as one, a question naming both shares one.
        ("Can I return a shipped order?", "Can I return a delivered order?", "states differ"),
        ("How do I edit a draft post?", "How do I edit a published post?", "states differ"),
        ("Where are my archived files?", "Where are my deleted files?", "states differ"),
        ("已发货的订单能改地址吗", "已签收的订单能改地址吗", "states differ"),
        ("审核中的贷款能取消吗", "已批准的贷款能取消吗", "states differ"),
        ("発送済みの注文は変更できますか", "配達済みの注文は変更できますか", "states differ"),
        ("¿Puedo cambiar un pedido enviado?", "¿Puedo cambiar un pedido entregado?", "states differ"),
        ("Has my order been dispatched yet?", "Has my order shipped?", ""),
        ("Why was my card declined?", "Why was my card rejected?", ""),
        ("My parcel shipped but never arrived", "It says delivered but the shipped parcel is not here", ""),
        ("花呗还款逾期怎么处理", "花呗还款过期会怎么办", ""),  # one state of a repayment
        ("How do I cancel my order?", "How do I delete my order?", ""),  # actions asked for, no state
        ("Is the paid plan billed monthly?", "Is the shipped version the latest?", ""),  # "paid plan" is a tier
        # Another day, month or language by name; one named in other words, or both of a range, is the same.
        ("Is the clinic open on Wednesday?", "Is the clinic open on Sunday?", "days differ"),
        ("周二能预约吗", "周日能预约吗", "days differ"),
        ("金曜日は営業していますか", "火曜日は営業していますか", "days differ"),
        ("¿Abren el jueves?", "¿Abren el lunes?", "days differ"),
        ("Does the promotion end in October?", "Does the promotion end in September?", "days differ"),
        ("Is the guide available in Korean?", "Is the guide available in German?", "languages differ"),
        ("有中文客服吗", "有英文客服吗", "languages differ"),
        ("Gibt es das Handbuch auf Französisch?", "Gibt es das Handbuch auf Italienisch?", "languages differ"),
        ("Are you open on Saturdays?", "Do you open Saturday?", ""),
        ("礼拜天营业吗", "星期日开门吗", ""),
        ("Are you open Monday to Friday?", "Are you open from Monday through Friday?", ""),
        ("说明书有中文的吗", "有普通话说明吗", ""),  # written and spoken Chinese, one language
        ("一周一次的课可以改吗", "每周课程能改时间吗", ""),  # 一周一次 names no day
        ("Can I polish the screen?", "How do I clean the screen?", ""),
        # Portuguese "no" is "in the"; Spanish and English "no" deny.
        ("Vocês abrem no sábado?", "Vocês abrem aos sábados?", ""),
        ("Posso pagar no app?", "Não posso pagar no app?", "negation differs"),
        ("¿Abren los domingos?", "¿No abren los domingos?", "negation differs"),
        ("Is there a refund?", "Is there no refund?", "negation differs"),
        # A day told from today, or the other party of an exchange; days of two scales are the asker's example.
        ("Can my parcel arrive tomorrow?", "Can my parcel arrive today?", "days differ"),
        ("今天下单明天能到吗", "今天下单今天能到吗", "days differ"),  # each names a day once more than the other
        ("下周有空位吗", "本周有空位吗", "days differ"),
        ("¿Llega hoy el pedido?", "¿Llega mañana el pedido?", "days differ"),
        ("我今天用花呗什么时候还", "这个月用花呗什么时候还", ""),  # a day and a month: two scales
        ("¿Abren por la mañana?", "¿Abren hoy?", ""),  # "la mañana" is the morning
        (
            "Can I upgrade from the Basic plan to the Pro plan?",
            "Can I upgrade from the Basic plan to the Premium plan?",
            "tiers differ",
        ),
        ("Can the landlord keep my deposit?", "Can the tenant keep my deposit?", "roles differ"),
        ("司机可以取消订单吗", "乘客可以取消订单吗", "roles differ"),
        ("Muss der Vermieter zahlen?", "Muss der Mieter zahlen?", "roles differ"),
        ("Is the gym upstairs?", "Is the gym downstairs?", "opposite actions"),
        # Who a product or rule is for, the part of the day, the cabin; early or late, start or end.
        ("Are the hiking boots for men?", "Are the hiking boots for women?", "groups differ"),
        ("女款T恤有几个颜色", "男款T恤有几个颜色", "groups differ"),
        ("Do children need a passport?", "Do seniors need a passport?", "groups differ"),
        ("Kostet der Eintritt für Kinder etwas?", "Kostet der Eintritt für Erwachsene etwas?", "groups differ"),
        ("Do full-time staff get a bonus?", "Do part-time staff get a bonus?", "groups differ"),
        ("兼职有工资条吗", "全职有工资条吗", "groups differ"),
        ("Can I book a table in the afternoon?", "Can I book a table in the evening?", "times of day differ"),
        ("上午可以去办理吗", "晚上可以去办理吗", "times of day differ"),
        ("Is wifi free in business class?", "Is wifi free in economy class?", "tiers differ"),
        ("头等舱可以带宠物吗", "商务舱可以带宠物吗", "tiers differ"),
        ("Is early payment rewarded?", "Is late payment rewarded?", "opposite actions"),
        ("When does the promotion start?", "When does the promotion end?", "opposite actions"),
        (
            "Do I get a full refund for a late delivery?",
            "Do I get a partial refund for a late delivery?",
            "opposite actions",
        ),
        ("Why is my rear camera blurry?", "Why is my selfie camera blurry?", "opposite actions"),
        ("Do kids ride free?", "Do children ride free?", ""),
        ("Do you stock ladies' boots?", "Do you have boots for women?", ""),
        ("What kind of ticket does a child need?", "Which ticket does a kid need?", ""),  # "kind" is no German child
        ("When does the sale begin?", "When does the sale start?", ""),
        ("Is the economy of India growing?", "Is India's economy growing?", ""),  # no cabin
        ("我的ID忘了", "아이디를 잊어버렸어요", ""),
        # Upper or lower, inside or outside, another season or size; tax included or not.
        ("Is the upper floor accessible?", "Is the lower floor accessible?", "opposite actions"),
        ("Can I park outside?", "Can I park indoors?", "opposite actions"),
        ("Is the market open in winter?", "Is the market open in summer?", "seasons differ"),
        ("春装什么时候上新", "秋装什么时候上新", "seasons differ"),
        ("Does this coat come in medium?", "Does this coat come in extra large?", "sizes differ"),
        ("中码还有吗", "大码还有吗", "sizes differ"),
        ("上层座位可以选吗", "下层座位可以选吗", "opposite actions"),
        ("税前收入怎么填", "税后收入怎么填", "opposite actions"),
        ("价格含税吗", "价格是不含税的吗", "negation differs"),
        ("Is the small size enough?", "Is size small enough?", ""),
        ("Is the pool indoors?", "Is the pool inside?", ""),
        ("暑假几点开门", "夏天几点开门", ""),
        ("春节放假吗", "冬天放假吗", ""),  # 春节 is a holiday, no spring
        ("Mon colis a été livré ?", "Mon colis est livré en hiver ?", ""),  # "a été" is "has been"
        # Picking up or dropping off, top or bottom, left or right, dark or light, across or down, compass points.
        ("Where do I pick up the rental van?", "Where do I return the rental van?", "opposite actions"),
        (
            "Why is the menu at the top of the screen?",
            "Why is the menu at the bottom of the screen?",
            "opposite actions",
        ),
        ("How do I indent on the left?", "How do I indent on the right?", "opposite actions"),
        ("Is there a dark theme?", "Is there a light theme?", "opposite actions"),
        ("Can I scroll horizontally?", "Can I scroll vertically?", "opposite actions"),
        ("Does the north exit have a lift?", "Does the south exit have a lift?", "directions differ"),
        ("东门停车场在哪", "西门停车场在哪", "directions differ"),
        ("还车需要加油吗", "取车需要加油吗", "opposite actions"),
        ("右の画面が暗い", "左の画面が暗い", "opposite actions"),
        ("¿Dónde recojo mi pedido?", "¿Dónde devuelvo mi pedido?", "opposite actions"),
        ("Where do I collect my parcel?", "Where can I pick up my parcel?", ""),
        ("买东西可以退吗", "买西瓜可以退吗", ""),  # 东西 is "a thing"
        ("房间朝南吗", "房间晚上吵吗", ""),  # 朝 is "facing", no morning
        ("배송 경로를 확인할 수 있나요", "어린이 요금이 있나요", ""),  # 경로 is also "a route"
        ("¿Puedo pagar este mes?", "¿Puedo pagar en la tienda oeste?", ""),  # "este" is "this"
        ("Comment payer sur mobile ?", "Comment aller à la sortie nord ?", ""),  # "sur" is "on"
        # Wired or wireless, hot or cold, renting or buying, primary or secondary, one room or two.
        ("Is the wireless charger included?", "Is the wired charger included?", "opposite actions"),
        ("Is the hot tap working?", "Is the cold tap working?", "opposite actions"),
        ("Can I lease the car?", "Can I buy the car?", "opposite actions"),
        ("Can I remove the primary email?", "Can I remove the secondary email?", "opposite actions"),
        ("Are local taxes included?", "Are international taxes included?", "opposite actions"),
        ("有线网怎么连", "无线网怎么连", "opposite actions"),
        ("副卡怎么激活", "主卡怎么激活", "opposite actions"),
        ("出租车可以刷卡吗", "买车可以刷卡吗", ""),  # 出租车 is a taxi
        ("Can I rent skis?", "Is ski rental available?", ""),
        ("单人间多大", "单人房有多大", ""),
        # Undo or redo, faster or slower, money in or out, signing up or signing in.
        ("How do I undo a deletion?", "How do I redo a deletion?", "opposite actions"),
        ("Can I speed up the animation?", "Can I slow down the animation?", "opposite actions"),
        ("Where is my income report?", "Where is my expenses report?", "opposite actions"),
        ("Why can't I sign up with Apple?", "Why can't I sign in with Apple?", "opposite actions"),
        ("注册要实名吗", "登录要实名吗", "opposite actions"),
        ("회원가입 방법", "로그인 방법", "opposite actions"),
        ("How do I sign up for updates?", "How do I subscribe to updates?", ""),
        ("Can I make the video faster?", "Can I speed up the video?", ""),
        ("How can I make my laptop faster?", "Why is my laptop getting slower?", ""),
        ("Can riders rate the driver?", "Can passengers rate their driver?", ""),
        ("Does the landlord fix the boiler?", "Is the property owner responsible for the boiler?", ""),
        ("Can teachers see student grades?", "Can students see teacher grades?", "words swapped"),  # inflected anew
        ("Can a teacher see student grades?", "Can teachers see the grades of students?", ""),
        # A day told from an event: the day before, the same day, the day after.
        ("Can I cancel the class the day before?", "Can I cancel the class on the day?", "days differ"),
        ("入住前一天取消要钱吗", "入住当天取消要钱吗", "days differ"),
        ("Is same-day delivery free?", "Is next-day delivery free?", "days differ"),
        ("入住当天可以取消吗", "入住当日能取消吗", ""),
        ("How do I turn on 2FA?", "How do I enable two-factor authentication?", ""),
        ("How do I turn on 2-step verification?", "How do I enable two step verification?", ""),
        ("Convert mp3 to h264?", "How to convert mp3 files to h264 video?", ""),
        # Who acts on whose, swapped: one thing given to two owners, each named by the other question.
        ("Can admins see my messages?", "Can I see the admins' messages?", "owners swapped"),
        ("Can my manager see my calendar?", "Can I see my manager's calendar?", "owners swapped"),
        ("How do I add my spouse to my account?", "How do I add myself to my spouse's account?", "owners swapped"),
        ("Can my sister use my card?", "Can I use my sister’s card?", "owners swapped"),  # a typographic apostrophe
        # The other party written before the thing, no possessive ending: the one who acts in the other question.
        ("Can the admin reset my password?", "Can I reset the admin password?", "owners swapped"),
        ("Can the admin reset my password?", "How do I reset the admin password?", "owners swapped"),
        ("Will the driver see my phone number?", "Will I see the driver phone number?", "owners swapped"),
        ("Can the team lead edit my calendar?", "Can I edit the team lead calendar?", "owners swapped"),  # two words
        ("Is the admin able to reset my password?", "How do I reset the admin password?", "owners swapped"),
        # The same owners in other words, or an owner the other question does not name, is no swap.
        ("Can my boss read my messages?", "Are my messages readable by my boss?", ""),
        ("How do I see the seller's rating?", "Where is the seller's rating shown?", ""),
        ("How do I reset my password?", "How do you reset your password?", ""),  # "your" is the asker
        ("Where is the store's return policy?", "Where can I read your return policy?", ""),
        ("How do you hack someone's Snapchat?", "How can I hack my Snapchat?", ""),
        ("How do I change my account's email?", "How do I change the email of my account?", ""),
        ("What's my boss's email?", "What is the boss's email?", ""),  # a contraction owns nothing
        ("How do I improve my English?", "How can people improve their English?", ""),  # "their" is not read
        ("Can the admin reset my password?", "How does the admin reset my password?", ""),  # the same one acts
        ("Is the admin able to reset my password?", "Can the admin reset my password?", ""),
        ("Can I reset the admin password?", "How do I reset the admin password?", ""),  # nothing of mine
        ("Can I change the account email?", "Can the account email change my password?", ""),  # not my email
        ("Can I see the shared files?", "Can the shared folder hold my files?", ""),  # "shared" acts on nothing
        # Two things swapped in the same words: two questions, unless a symmetric word relates them.
        ("What if Apple buys Samsung?", "What if Samsung buys Apple?", "words swapped"),
        (
            "Can I merge my old account into my new account?",
            "Can I merge my new account into my old account?",
            "words swapped",
        ),
        ("Should I install the driver before the app?", "Should I install the app before the driver?", "words swapped"),
        ("Can teachers message students in the app?", "Can students message teachers in the app?", "words swapped"),
        # the possessive moves with the thing it leads
        ("Can subscribers see who I subscribe to?", "Can I see who my subscribers subscribe to?", "words swapped"),
        ("How do I pitch my start up idea?", "How do I pitch my startup idea?", ""),
        (
            "What is the difference between the Pro plan and the Team plan?",
            "What is the difference between the Team plan and the Pro plan?",
            "",
        ),
        ("Can I pay with PayPal or a card?", "Can I pay with a card or PayPal?", ""),
        ("Is the Pro plan the same as the Team plan?", "Is the Team plan the same as the Pro plan?", ""),
        ("Compare the Pro plan to the Team plan", "Compare the Team plan to the Pro plan", ""),  # just before the first
        ("Is the charger compatible with the phone?", "Is the phone compatible with the charger?", ""),
        ("How do I send money to my bank from PayPal?", "How do I send money from PayPal to my bank?", ""),  # moved
    ],
)
def test_questions_conflict(first, second, reason):
    assert qp.questions_conflict(first, second) == reason
    assert qp.questions_conflict(second, first) == reason


@pytest.mark.parametrize(
    "text",
    [
        # "I don't withdraw my profits" beside "the income tax from profits": "my" owns, it does not act, so no party
        # is read before the asker's thing.
        "Can anyone explain the income tax from profits made through Minance? If I don't withdraw my profits then how "
        "will I be taxed?",
        "If the admin resets my password, can I reset the admin password back?",  # both roles in one question
        "Can the admin reset my password and can I reset the admin password?",
        "Can admins see my messages and can I see the admins' messages?",
    ],
)
def test_a_question_never_conflicts_with_itself(text):
    assert qp.questions_conflict(text, text) == ""


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("Pricing for the 2,016 plan in 2017?", {"2016", "2017"}),
        ("1,000,000 users on version 2.0.1", {"1000000", "2.0.1"}),
        ("the 3rd floor, 24h support, 10GB", {"3", "24", "10"}),
        ("turn on 2FA, mp3 to h264, API v2, iPhone6", set()),
        ("v2.0 or 1.5?", {"1.5"}),
        # Clock times read as the hour, minutes as decimals; a whole amount's ".00" says nothing more.
        ("Are you open at 9:00am or 9:30?", {"9", "9.30"}),
        ("Open from 09:00 to 17:00, or 10:30 on Sundays?", {"9", "17", "10.30"}),
        ("Is it $9.00 or $1,000.00?", {"9", "1000"}),
        # Numbers written as words, by value; "one" and "zero" are left out (a pronoun, "from scratch").
        ("Can I add two users, or twenty-five, or two hundred and fifty?", {"2", "25", "250"}),
        ("Between two and three days, a thousand users, 2 million rows", {"2", "3", "1000"}),
        ("Which one is best? Learn it from zero", set()),
        ("Twenty-one days, or a hundred and one, or one hundred?", {"21", "101", "100"}),
        # Korean counts before a counter or a unit; Vietnamese, Indonesian, Russian case forms, Arabic. Not Korean 이
        # ("this") nor 오일 ("oil"), Vietnamese "thứ hai" (Monday) nor "năm" ("year"), Russian "семью" ("family").
        ("한 번에 두 명까지, 칠 일 이내, 여섯 달, 3일", {"2", "7", "6", "3"}),
        ("이 일은 언제까지? 엔진 오일 교체, 네, 알겠습니다", set()),
        ("Tôi có thể đặt bốn vé? Thứ hai có mở cửa không? Gói năm", {"4"}),
        ("Bisakah saya membuat dua akun atau tiga?", {"2", "3"}),
        ("Подписка для двух человек, после трёх попыток, добавить семью", {"2", "3"}),
        ("هل يمكن إرجاع المنتج خلال سبعة أيام؟", {"7"}),
        # A unit, or a ten before a ten or a teen, ends a number.
        ("Two one-way tickets, in twenty thirty, nineteen eighty", {"2", "20", "30", "19", "80"}),
        ("¿Puedo tener dos cuentas? Kann ich zwei Konten haben? Puis-je avoir trois comptes ?", {"2", "3"}),
        # French "dois" beside "je" or "tu" is "must"; Portuguese "dois" elsewhere is two.
        ("Dois-je payer après la livraison ? Je dois confirmer ? Tu dois attendre ?", set()),
        ("Posso ter dois cartões?", {"2"}),
        # Words of other languages that are English words or read in English text are not numbers there.
        ("Is my payment due? Can I pay once? Can I run six tests?", {"6"}),
        # Not clock times nor whole amounts: a ratio, a time with seconds, a version's trailing zero, dotted groups.
        ("16:9 screens, 12:30:45 sharp, Python 3.10, 1.000 units", {"16", "9", "12", "30", "45", "3.10", "1.000"}),
    ],
)
def test_numbers_are_quantities_not_digits_inside_words(text, numbers):
    assert qp.numbers_in(text) == numbers


@pytest.mark.parametrize(
    ("question", "dependent"),
    [
        ("and for admins?", True),
        ("What about the enterprise plan?", True),
        ("How do I change it?", True),
        ("Is that free?", True),
        ("pricing?", True),
        ("How do I reset the password of an administrator account?", False),
        ("Which countries does the Arizona Cardinals franchise play games in?", False),
    ],
)
def test_context_dependent_questions(question, dependent):
    assert qp.question_is_context_dependent(question) is dependent


def _stored(
    turn_id, question, vector, previous=None, answerable=True, conversation_id=1, partial_index=False, cites=True
):
    return d.StoredQuestion(
        turn_id=turn_id,
        question=question,
        vector=vector,
        conversation_id=conversation_id,
        previous_vector=previous,
        answerable=answerable,
        partial_index=partial_index,
        cites=cites,
    )


def test_duplicate_at_threshold_hits_and_below_does_not():
    q = unit(1, 0, 0)
    close = unit(1, 0.2, 0)  # cosine ~0.98
    candidate = _stored(7, "How do I reset my password quickly?", close)
    threshold = float(q @ close)
    hit = d.duplicate_decide(
        question="How can I reset my password quickly?",
        question_vector=q,
        previous_vector=None,
        candidates=[candidate],
        threshold=threshold,
    )
    assert hit.hit and hit.turn_id == 7 and hit.similarity == pytest.approx(threshold)
    miss = d.duplicate_decide(
        question="How can I reset my password quickly?",
        question_vector=q,
        previous_vector=None,
        candidates=[candidate],
        threshold=threshold + 1e-4,
    )
    assert not miss.hit and miss.reason == "below threshold" and miss.turn_id == 7


def test_a_question_asked_again_word_for_word_reports_a_similarity_of_at_most_one():
    """float32 rounding made the cosine of a vector with itself 1.0000001, and the API and audit log said so; a cosine
    is at most 1, and a threshold of 1.0 still serves the same question asked again."""
    vector = np.random.default_rng(12).standard_normal(384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    assert float((np.stack([vector]) @ vector)[0]) > 1.0  # the rounding this test is about
    candidate = _stored(7, "How do I rotate my API key?", vector)
    decision = d.duplicate_decide(
        question="How do I rotate my API key?",
        question_vector=vector,
        previous_vector=None,
        candidates=[candidate],
        threshold=1.0,
        use_head=False,
    )
    assert decision.hit and decision.similarity == 1.0


def test_the_decision_reports_the_gate_it_applied():
    q = unit(1, 0, 0)
    candidate = _stored(7, "How do I reset my password quickly?", unit(1, 0.5, 0))  # cosine ~0.89
    kwargs = {"question": "How can I reset my password quickly?", "question_vector": q, "previous_vector": None}
    headless = d.duplicate_decide(**kwargs, candidates=[candidate], threshold=0.76, use_head=False)
    assert not headless.hit and headless.reason == "below threshold" and headless.gate == d.HEADLESS_THRESHOLD_FLOOR
    assert d.duplicate_decide(**kwargs, candidates=[candidate], threshold=0.5, use_head=False).gate == 0.90
    assert d.duplicate_decide(**kwargs, candidates=[candidate], threshold=0.95, use_head=False).gate == 0.95
    assert d.duplicate_decide(**kwargs, candidates=[], threshold=0.76).gate is None


def test_cosine_gate_is_the_gate_the_decision_applies():
    """What the dashboard marks as the current threshold: the gate `duplicate_decide` reports for the same setup."""
    q = unit(1, 0, 0)
    candidate = _stored(7, "How do I reset my password quickly?", unit(1, 0.5, 0))
    kwargs = {"question": "How can I reset my password quickly?", "question_vector": q, "previous_vector": None}
    trained_on = d.pair_model_default().meta.get("embedding_model")
    for threshold in (0.5, 0.76, 0.95):
        for use_head, embedding_model in ((True, None), (True, trained_on), (False, None), (True, "another-model")):
            setup = {"threshold": threshold, "use_head": use_head, "embedding_model": embedding_model}
            decided = d.duplicate_decide(**kwargs, candidates=[candidate], **setup)
            assert d.cosine_gate(**setup, dimension=3) == decided.gate, setup
    assert d.cosine_gate(threshold=0.76, use_head=True, embedding_model=None) == 0.76
    assert d.cosine_gate(threshold=0.76, use_head=True, embedding_model=trained_on) == 0.76
    assert d.cosine_gate(threshold=0.76, use_head=False, embedding_model=None) == d.HEADLESS_THRESHOLD_FLOOR
    assert d.cosine_gate(threshold=0.76, use_head=True, embedding_model="another-model") == d.HEADLESS_THRESHOLD_FLOOR


def test_questions_embedded_by_another_model_are_not_compared():
    q = unit(1, 0, 0)
    old_model = _stored(3, "How can I reset my password quickly?", unit(1, 0, 0, 0))
    same_model = _stored(4, "How do I reset my password quickly?", unit(1, 0.2, 0))
    decision = d.duplicate_decide(
        question="How can I reset my password quickly?",
        question_vector=q,
        previous_vector=None,
        candidates=[old_model, same_model],
        threshold=0.9,
    )
    assert decision.hit and decision.turn_id == 4
    alone = d.duplicate_decide(
        question="x", question_vector=q, previous_vector=None, candidates=[old_model], threshold=0.9
    )
    assert not alone.hit and alone.turn_id is None


def test_vectors_are_comparable_only_when_the_same_recorded_model_made_them():
    assert d.vectors_comparable(stored_model="a1b2", current_model="a1b2")
    assert not d.vectors_comparable(stored_model="c3d4", current_model="a1b2")
    assert not d.vectors_comparable(stored_model="", current_model="a1b2")  # not recorded: unknown model
    assert not d.vectors_comparable(stored_model=None, current_model="a1b2")


def test_questions_embedded_by_another_model_of_the_same_size_are_never_a_hit():
    """After a switch to another model of the same size, an old pair's cosine looks like any other (here 1.0) and
    means nothing: it is left out, and a miss with nothing else to compare says why."""
    q = unit(1, 0, 0)
    old = d.StoredQuestion(3, "How do I reset my password?", q, 1, None, vector_model="old")
    unrecorded = d.StoredQuestion(4, "How do I reset my password?", q, 1, None, vector_model="")
    current = d.StoredQuestion(5, "How can I reset my password?", unit(1, 0.2, 0), 1, None, vector_model="new")
    kwargs = {"question": "How do I reset my password?", "question_vector": q, "previous_vector": None}
    only_old = d.duplicate_decide(**kwargs, candidates=[old, unrecorded], threshold=0.9, vector_model="new")
    assert not only_old.hit and only_old.turn_id is None and only_old.similarity is None
    assert only_old.reason == d.OTHER_MODEL_REASON
    mixed = d.duplicate_decide(**kwargs, candidates=[old, unrecorded, current], threshold=0.9, vector_model="new")
    assert mixed.hit and mixed.turn_id == 5
    below = d.duplicate_decide(**kwargs, candidates=[old, current], threshold=0.99, vector_model="new")
    assert not below.hit and below.turn_id == 5 and below.reason == "below threshold"
    assert d.duplicate_decide(**kwargs, candidates=[], threshold=0.9, vector_model="new").reason == ""
    # Under the old model the old pair is the one served.
    assert d.duplicate_decide(**kwargs, candidates=[old, current], threshold=0.9, vector_model="old").turn_id == 3


def test_a_context_embedded_by_another_model_is_unknown():
    """A follow-up asked right after a question of the old model: that question's vector says nothing in the new
    model's space, so the context is unknown (alike to none) and a context-dependent pair is refused."""
    pricing = unit(0, 1, 0)
    unknown = d.followup_context(previous_vector=pricing, previous_names_topic=True, previous_comparable=False)
    assert unknown.shape == pricing.shape and not unknown.any()
    assert d.followup_context(previous_vector=None, previous_names_topic=True, previous_comparable=False) is None
    q = unit(1, 0, 0)
    stored = _stored(5, "and for admins?", q, previous=pricing)
    decision = d.duplicate_decide(
        question="and for admins?", question_vector=q, previous_vector=unknown, candidates=[stored], threshold=0.9
    )
    assert not decision.hit and decision.reason == "follow-up in another context"


def test_names_topic_does_not_classify_a_vector_of_another_model():
    intents = [d.IntentExamples("greeting", "smalltalk", np.stack([unit(1, 0, 0)]))]
    hello = unit(1, 0, 0)
    assert d.names_topic(vectors=[hello, hello], intents=intents) == [False, False]
    assert d.names_topic(vectors=[hello, hello], intents=intents, comparable=[True, False]) == [False, True]


def test_duplicate_skips_refused_candidates_and_reports_them():
    q = unit(1, 0, 0)
    candidates = [
        _stored(1, "Pricing of the 2016 business plan?", unit(1, 0.01, 0)),  # numbers differ
        _stored(2, "Pricing of the 2017 business plan?", unit(1, 0.02, 0), answerable=False),
        _stored(3, "What is the pricing of the 2017 business plan?", unit(1, 0.05, 0)),
    ]
    decision = d.duplicate_decide(
        question="Pricing of the 2017 business plan?",
        question_vector=q,
        previous_vector=None,
        candidates=candidates,
        threshold=0.9,
    )
    assert decision.hit and decision.turn_id == 3
    assert decision.refused == [(1, "numbers differ"), (2, "no stored answer")]


def test_a_pair_answered_from_a_partial_index_is_refused_with_the_reason_and_the_next_one_served():
    q = unit(1, 0, 0)
    partial = _stored(1, "Pricing of the 2017 business plan?", unit(1, 0.01, 0), partial_index=True)
    full = _stored(2, "What is the pricing of the 2017 business plan?", unit(1, 0.05, 0))
    decide = functools.partial(
        d.duplicate_decide, question="Pricing of the 2017 business plan?", question_vector=q, previous_vector=None
    )
    decision = decide(candidates=[partial, full], threshold=0.9)
    assert decision.hit and decision.turn_id == 2
    assert decision.refused == [(1, d.PARTIAL_INDEX_REASON)]
    alone = decide(candidates=[partial], threshold=0.9)
    assert not alone.hit and alone.reason == d.PARTIAL_INDEX_REASON and alone.turn_id == 1
    assert alone.passes_checks is False


def test_an_answer_citing_no_source_is_refused_with_the_reason_and_the_next_one_served():
    """ "Nothing found", or a model saying the passages do not hold the answer: the later answer to the same question
    is served, not refused behind it."""
    q = unit(1, 0, 0)
    uncited = _stored(1, "How much is the Enterprise plan?", unit(1, 0.01, 0), cites=False)
    cited = _stored(2, "How much is the Enterprise plan?", unit(1, 0.05, 0))
    decide = functools.partial(
        d.duplicate_decide, question="How much is the Enterprise plan?", question_vector=q, previous_vector=None
    )
    decision = decide(candidates=[uncited, cited], threshold=0.9)
    assert decision.hit and decision.turn_id == 2 and decision.refused == [(1, d.NO_SOURCE_REASON)]
    alone = decide(candidates=[uncited], threshold=0.9)
    assert not alone.hit and alone.reason == d.NO_SOURCE_REASON
    # A question the model cannot read is served only an exact repeat, and not one citing nothing either.
    assert not d.unreadable_decide(
        question="How much is the Enterprise plan?", previous_vector=None, candidates=[uncited]
    ).hit


def test_followup_guard_needs_the_same_context():
    q = unit(1, 0, 0)
    pricing, api_limits = unit(0, 1, 0), unit(0, 0, 1)
    stored = _stored(5, "and for admins?", q, previous=pricing)
    other_context = d.duplicate_decide(
        question="and for admins?", question_vector=q, previous_vector=api_limits, candidates=[stored], threshold=0.9
    )
    assert not other_context.hit and other_context.reason == "follow-up in another context"
    same_context = d.duplicate_decide(
        question="and for admins?",
        question_vector=q,
        previous_vector=unit(0, 1, 0.05),
        candidates=[stored],
        threshold=0.9,
    )
    assert same_context.hit
    first_turn_vs_followup = d.duplicate_decide(
        question="and for admins?", question_vector=q, previous_vector=None, candidates=[stored], threshold=0.9
    )
    assert not first_turn_vs_followup.hit


@pytest.mark.parametrize(
    ("question", "stored_question", "previous", "stored_previous", "just_before", "matches"),
    [
        # A rephrasing right after the question itself, the first of its conversation: its own context.
        ("I forgot it, what now?", "How do I reset my password?", "pricing", None, True, True),
        ("How do I change it?", "How do I change my password?", "pricing", "admins", True, True),
        ("and for admins?", "and for admins?", "zero", "pricing", True, True),
        # The same stored question not asked just before: the guard compares the contexts as ever.
        ("I forgot it, what now?", "How do I reset my password?", "pricing", None, False, False),
        ("and for admins?", "and for admins?", "pricing", "admins", False, False),
        ("and for admins?", "and for admins?", "pricing", "pricing", False, True),
        ("and for admins?", "and for admins?", None, None, False, True),
        # Standalone questions never need a context.
        ("How do I reset my password?", "How do I reset the password?", "pricing", None, False, True),
    ],
)
def test_followup_context_matches(question, stored_question, previous, stored_previous, just_before, matches):
    vectors = {"pricing": unit(0, 1, 0), "admins": unit(0, 0, 1), "zero": np.zeros(3, dtype=np.float32), None: None}
    candidate = d.StoredQuestion(
        turn_id=1,
        question=stored_question,
        vector=unit(1, 0, 0),
        conversation_id=1,
        previous_vector=vectors[stored_previous],
        asked_just_before=just_before,
    )
    assert (
        d.followup_context_matches(
            question=question, previous_vector=vectors[previous], candidate=candidate, threshold=0.9
        )
        is matches
    )


def test_followup_guard_refuses_a_context_embedded_by_another_model():
    """A conversation that spans a model change: the stored follow-up's previous question has another vector size.
    The contexts cannot be compared, so the pair is refused (it used to raise, a 500 on every such turn)."""
    q = unit(1, 0, 0)
    stored = _stored(5, "and for admins?", q, previous=unit(0, 1, 0, 0))
    decision = d.duplicate_decide(
        question="and for admins?", question_vector=q, previous_vector=unit(0, 1, 0), candidates=[stored], threshold=0.9
    )
    assert not decision.hit and decision.reason == "follow-up in another context"


def test_followup_context_after_a_question_without_a_topic_matches_nothing():
    """ "and for admins?" after "thanks" is about whatever came before the thanks: its context is unknown, and two
    such follow-ups (both after "thanks", whose vectors are the same) are not the same question."""
    thanks = unit(0, 1, 0)
    assert d.followup_context(previous_vector=None, previous_names_topic=True) is None
    assert d.followup_context(previous_vector=thanks, previous_names_topic=True) is thanks
    unknown = d.followup_context(previous_vector=thanks, previous_names_topic=False)
    assert unknown.shape == thanks.shape and not unknown.any()
    q = unit(1, 0, 0)
    stored = _stored(5, "and for admins?", q, previous=unknown)
    kwargs = {"question": "and for admins?", "question_vector": q, "candidates": [stored], "threshold": 0.9}
    for previous in (unknown, thanks, None):
        decision = d.duplicate_decide(**kwargs, previous_vector=previous)
        assert not decision.hit and decision.reason == "follow-up in another context"
    # A question that stands alone does not need the context.
    standalone = _stored(6, "How do I rotate the API keys of my organisation?", q, previous=unknown)
    assert d.duplicate_decide(
        question="How do I rotate the API keys of my organisation?",
        question_vector=q,
        previous_vector=unknown,
        candidates=[standalone],
        threshold=0.9,
    ).hit


def test_followup_guard_keeps_its_floor_under_a_low_gate():
    q = unit(1, 0, 0)
    stored = _stored(5, "and for admins?", q, previous=unit(0, 1, 0))
    previous = unit(0, 1, 0.8)  # cosine ~0.78 with the stored question's previous one
    kwargs = {"question": "and for admins?", "question_vector": q, "previous_vector": previous, "candidates": [stored]}
    low_gate = d.duplicate_decide(**kwargs, threshold=0.70)
    assert not low_gate.hit and low_gate.reason == "follow-up in another context"
    close = d.duplicate_decide(**{**kwargs, "previous_vector": unit(0, 1, 0.3)}, threshold=0.70)
    assert close.hit  # cosine ~0.96 >= the floor


def test_standalone_question_ignores_context():
    q = unit(1, 0, 0)
    stored = _stored(5, "How do I rotate the API keys of my organisation?", q, previous=unit(0, 1, 0))
    decision = d.duplicate_decide(
        question="How do I rotate the API keys of my organisation?",
        question_vector=q,
        previous_vector=unit(0, 0, 1),
        candidates=[stored],
        threshold=0.9,
    )
    assert decision.hit


def test_no_candidates_no_hit():
    assert d.duplicate_decide(
        question="x", question_vector=unit(1, 0), previous_vector=None, candidates=[], threshold=0.5
    ) == d.DuplicateDecision(hit=False)


def test_question_collections_are_named_by_embedding_model(settings):
    settings.MILVUS_COLLECTION = "kb_chunks"
    assert question_collection_name(model="") == "kb_chunks_questions"  # from before models were recorded
    assert question_collection_name(model="07db4e1f186d") == "kb_chunks_questions_07db4e1f186d"
    for unsafe in ("all-MiniLM-L6-v2", "07DB", "x; drop", "0" * 33):
        with pytest.raises(ValueError):
            question_collection_name(model=unsafe)
