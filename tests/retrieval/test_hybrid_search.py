"""Full-text and hybrid retrieval on the real services (`milvus-lite server`, PostgreSQL under CI): an exact term the
embedding model does not know is found by its words; grouping by document and exclusions hold in every mode; a Chinese
knowledge base is found by a Chinese keyword (jieba); a knowledge base made before full text is searched semantic,
refuses full text with a 409 that says what to do, and is moved over online by `manage.py text_index`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from retrieval import embeddings, milvus, vectorstore
from retrieval.embeddings import embed_texts
from retrieval.models import (
    Chunk,
    Document,
    DocumentStatus,
    KnowledgeBase,
    RetrievalMode,
    SourceKind,
    TextAnalyzer,
    TextIndexStatus,
)
from retrieval.selectors import FullTextUnavailableError, chunk_search
from retrieval.services import (
    chunk_vectors_upsert,
    knowledge_base_text_index,
    knowledge_base_text_index_start,
    knowledge_base_text_indexes_recover,
)
from tests.conversations.helpers import chunk_hash, indexed_kb

ERROR_CODE = "ZX-4471Q"
SUPPORT = {
    "network": [
        "When the gateway cannot reach the upstream server the request fails and is retried with backoff.",
        "Connection problems are usually caused by a firewall rule or a wrong proxy setting.",
    ],
    "codes": [
        f"The device reports {ERROR_CODE} when its battery calibration table is corrupt; reflash the table.",
        "Firmware updates are signed; an unsigned image is refused at boot.",
    ],
    "printing": [
        "If the printer does not respond, check that it is switched on and has paper.",
        "Printing stops when the queue holds a job that cannot be rendered.",
    ],
    "power": [
        "The battery charges fully in two hours with the supplied adapter.",
        "A battery that does not charge may need a new cable or adapter.",
    ],
}


def _search(tenant, knowledge_base: KnowledgeBase, text: str, **kwargs: object) -> list:
    return chunk_search(
        tenant=tenant,
        knowledge_base=knowledge_base,
        query_vector=embeddings.embed_query(text),
        query_text=text,
        query_model_identity=embeddings.model_identity(),
        limit=kwargs.pop("limit", 5),
        **kwargs,
    )


def _external_ids(hits: list) -> list[str]:
    return [hit.document_external_id for hit in hits]


def _found_first_by_words(tenant, cases) -> None:
    """Each (knowledge base, question, external id) of `cases`: a full-text search of the question puts that document
    first."""
    for knowledge_base, question, expected in cases:
        hits = _search(tenant, knowledge_base, question, retrieval_mode=RetrievalMode.FULL_TEXT)
        assert _external_ids(hits)[:1] == [expected], question


@pytest.mark.django_db
@pytest.mark.parametrize("mode", [RetrievalMode.FULL_TEXT, RetrievalMode.HYBRID])
def test_an_error_code_in_one_chunk_is_found_by_its_words(milvus_server, tenant, mode):
    knowledge_base = indexed_kb(tenant, SUPPORT, name=f"support-{mode}")

    hits = _search(tenant, knowledge_base, f"what does {ERROR_CODE} mean", retrieval_mode=mode)

    assert _external_ids(hits)[0] == "codes"
    assert ERROR_CODE in hits[0].text


@pytest.mark.django_db
def test_rank_fusion_runs_in_milvus_with_the_platforms_k(milvus_server, tenant, monkeypatch):
    # A chunk's own text puts it first on both sides, so its fused score is 2 / (k + 1): 20 as shipped
    # (docs/ingestion.md, "Rank fusion's k"), and whatever vectorstore.RRF_K says when it is changed.
    knowledge_base = indexed_kb(tenant, SUPPORT, name="support-rrf-k", retrieval_mode=RetrievalMode.HYBRID)
    text = SUPPORT["codes"][0]

    shipped = _search(tenant, knowledge_base, text)
    monkeypatch.setattr(vectorstore, "RRF_K", 60)
    milvus_default = _search(tenant, knowledge_base, text)

    assert _external_ids(shipped)[0] == _external_ids(milvus_default)[0] == "codes"
    assert shipped[0].score == pytest.approx(2 / 21)
    assert milvus_default[0].score == pytest.approx(2 / 61)


@pytest.mark.django_db
def test_every_mode_gives_each_hit_its_cosine_to_the_query(milvus_server, tenant):
    """A fused or BM25 score says how a hit ranked; its similarity, when asked for, is how near it is in meaning, the
    cosine a semantic search gives the same chunk, whatever ranked it."""
    knowledge_base = indexed_kb(tenant, SUPPORT, name="support-similarity")
    text = "the battery does not charge with this adapter"
    every_chunk = {"limit": 20, "group_by_document": False}

    semantic = _search(tenant, knowledge_base, text, retrieval_mode=RetrievalMode.SEMANTIC, **every_chunk)
    cosines = {hit.chunk_id: hit.score for hit in semantic}
    assert len(cosines) == 8 and all(hit.similarity == hit.score for hit in semantic)
    for mode in (RetrievalMode.FULL_TEXT, RetrievalMode.HYBRID):
        hits = _search(tenant, knowledge_base, text, retrieval_mode=mode, hit_similarity=True, **every_chunk)
        assert hits and {hit.similarity for hit in hits} != {hit.score for hit in hits}
        assert [hit.similarity for hit in hits] == pytest.approx([cosines[hit.chunk_id] for hit in hits], abs=1e-4)
        # Not asked for, the hits' vectors are not fetched: their cosines are not known.
        unasked = _search(tenant, knowledge_base, text, retrieval_mode=mode, **every_chunk)
        assert [hit.chunk_id for hit in unasked] == [hit.chunk_id for hit in hits]
        assert {hit.similarity for hit in unasked} == {None}


@pytest.mark.django_db
def test_full_text_finds_nothing_for_words_no_chunk_holds(milvus_server, tenant):
    knowledge_base = indexed_kb(tenant, SUPPORT, name="support-nothing")

    assert _search(tenant, knowledge_base, "zeppelin xylophone", retrieval_mode=RetrievalMode.FULL_TEXT) == []


@pytest.mark.django_db
@pytest.mark.parametrize("mode", list(RetrievalMode))
@pytest.mark.parametrize("dense_weight", [None, 0.6])
def test_every_mode_keeps_one_chunk_per_document_and_never_returns_an_excluded_one(
    milvus_server, tenant, mode, dense_weight
):
    knowledge_base = indexed_kb(
        tenant, SUPPORT, name=f"support-{mode}-{dense_weight}", hybrid_dense_weight=dense_weight
    )
    question = "the battery does not charge"  # words of both chunks of "power", and of one of "codes"

    grouped = _search(tenant, knowledge_base, question, retrieval_mode=mode, limit=10)
    ungrouped = _search(tenant, knowledge_base, question, retrieval_mode=mode, limit=10, group_by_document=False)
    power = Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base, document__external_id="power")
    excluded = _search(
        tenant,
        knowledge_base,
        question,
        retrieval_mode=mode,
        limit=10,
        exclude_document_ids=[power.first().document_id],
    )
    excluded_chunk = _search(
        tenant, knowledge_base, question, retrieval_mode=mode, limit=10, exclude_chunk_ids=[grouped[0].chunk_id]
    )

    assert len(set(_external_ids(grouped))) == len(grouped)
    assert "power" in _external_ids(grouped)
    assert _external_ids(ungrouped).count("power") == 2  # both of its chunks match: grouping is what keeps one
    assert "power" not in _external_ids(excluded) and excluded
    assert grouped[0].chunk_id not in {hit.chunk_id for hit in excluded_chunk}


@pytest.mark.django_db
def test_a_chinese_knowledge_base_is_found_by_a_chinese_keyword(milvus_server, tenant):
    knowledge_base = indexed_kb(
        tenant,
        {
            "ml": ["机器学习是人工智能的一个分支，它让计算机从数据中学习。"],
            "weather": ["今天天气很好，我们下午去公园散步。"],
            "tea": ["绿茶在中国有悠久的历史，龙井是最有名的一种。"],
        },
        name="chinese",
        text_analyzer=TextAnalyzer.CHINESE,
    )

    for keyword, expected in (("人工智能", "ml"), ("公园", "weather"), ("龙井", "tea")):
        hits = _search(tenant, knowledge_base, keyword, retrieval_mode=RetrievalMode.FULL_TEXT)
        assert _external_ids(hits)[:1] == [expected], keyword
    # The same keywords in Traditional characters (Taiwan, Hong Kong) find the Simplified documents by their words too.
    for keyword, expected in (("人工智慧", "ml"), ("公園", "weather"), ("龍井", "tea")):
        hits = _search(tenant, knowledge_base, keyword, retrieval_mode=RetrievalMode.FULL_TEXT)
        assert _external_ids(hits)[:1] == [expected], keyword


@pytest.mark.django_db
def test_a_traditional_chinese_knowledge_base_is_found_by_its_own_script_and_by_simplified_keywords_too(
    milvus_server, tenant
):
    """A knowledge base written in Traditional characters (Taiwan, Hong Kong) is found by its words from a query in
    either script: its BM25 field holds the text in Simplified characters, and a Traditional query is given in both.
    A hit still shows the text as the document has it."""
    knowledge_base = indexed_kb(
        tenant,
        {"refund": ["退款審核通過後三到五個工作日到帳。"], "invoice": ["電子發票會在七天內寄到您的信箱。"]},
        name="traditional",
        text_analyzer=TextAnalyzer.CHINESE,
    )
    for keyword, expected in (("到帳", "refund"), ("發票", "invoice"), ("到帐", "refund"), ("发票", "invoice")):
        hits = _search(tenant, knowledge_base, keyword, retrieval_mode=RetrievalMode.FULL_TEXT)
        assert _external_ids(hits)[:1] == [expected], keyword
    assert _search(tenant, knowledge_base, "发票", retrieval_mode=RetrievalMode.FULL_TEXT)[0].text == (
        "電子發票會在七天內寄到您的信箱。"
    )


@pytest.mark.django_db
def test_japanese_korean_thai_and_hindi_knowledge_bases_are_found_by_the_words_a_question_shares_with_a_page(
    milvus_server, tenant
):
    """The default analyser's tokenizer cuts at spaces: a Japanese or Thai clause, or a Korean word with its particle,
    was one term, so a question found a page by its words only if it held the same clause; and Milvus Lite's cut a
    Hindi or Thai word at each vowel sign. Its field now holds these words with letters only and the unspaced scripts
    as overlapping pairs of letters, and so does the question: a word they share finds the page, however each writes
    the grammar around it. A hit still shows the text as the document has it."""
    japanese = indexed_kb(
        tenant,
        {
            "password": ["パスワードを忘れた場合は、ログイン画面から再設定してください。"],
            "shipping": ["配送料は全国一律500円です。"],
        },
        name="japanese",
    )
    korean = indexed_kb(
        tenant,
        {
            "refund": ["환불은 결제 취소 후 영업일 기준 3일 안에 처리됩니다."],
            "shipping": ["배송비는 3,000원이며 5만 원 이상 구매하시면 무료입니다."],
        },
        name="korean",
    )
    thai = indexed_kb(
        tenant,
        {"password": ["หากลืมรหัสผ่าน กรุณากดลิงก์รีเซ็ตในหน้าเข้าสู่ระบบ"], "shipping": ["ค่าจัดส่งสินค้า 50 บาททั่วประเทศ"]},
        name="thai",
    )
    hindi = indexed_kb(
        tenant,
        {"password": ["पासवर्ड भूल जाने पर लॉगिन पेज से नया पासवर्ड बनाएं।"], "refund": ["रिफंड पांच दिन में मिलता है।"]},
        name="hindi",
    )
    assert japanese.text_analyzer == TextAnalyzer.ENGLISH and korean.text_analyzer == TextAnalyzer.ENGLISH
    _found_first_by_words(
        tenant,
        [
            (japanese, "パスワード忘れちゃった", "password"),
            (japanese, "送料はいくら？", "shipping"),
            (korean, "환불 언제 돼요", "refund"),
            (korean, "배송비 얼마예요", "shipping"),
            (thai, "ลืมรหัสผ่านทำไงดี", "password"),  # no space, and vowels above and below the line
            (thai, "ค่าส่งเท่าไหร่", "shipping"),
            (hindi, "रिफंड कब मिलेगा", "refund"),  # a word with vowel signs is one word: not "र", "फ", "ड"
            (hindi, "पासवर्ड भूल गया", "password"),
        ],
    )
    # "Mobile number" shares no word with either Hindi page; cut at its vowel signs it shared "म" and "न" with both.
    assert _search(tenant, hindi, "मोबाइल नंबर", retrieval_mode=RetrievalMode.FULL_TEXT) == []
    (hit,) = _search(tenant, japanese, "パスワード忘れちゃった", retrieval_mode=RetrievalMode.FULL_TEXT)
    assert hit.text == "パスワードを忘れた場合は、ログイン画面から再設定してください。"


@pytest.mark.django_db
def test_russian_arabic_and_greek_knowledge_bases_are_found_by_a_word_the_question_inflects_otherwise(
    milvus_server, tenant
):
    """The default analyser's stemmer is English: "пароль" and "пароля", "حسابي" and "الحساب" were two terms each, so a
    question found a page only where both wrote the same form. The field and the question hold each Cyrillic, Arabic,
    Devanagari and Greek word as its stem: the word finds the page in any of its forms, and a hit shows the text as
    written."""
    russian = indexed_kb(
        tenant,
        {
            "password": ["Восстановление пароля: нажмите «Забыли пароль?» на странице входа."],
            "orders": ["Отслеживание заказов доступно в личном кабинете."],
        },
        name="russian",
    )
    arabic = indexed_kb(
        tenant,
        {"account": ["تغيير بيانات الحساب من صفحة الإعدادات."], "shipping": ["رسوم الشحن إلى جميع المدن ثابتة."]},
        name="arabic",
    )
    greek = indexed_kb(
        tenant,
        {"account": ["Διαγραφή λογαριασμού από τις ρυθμίσεις."], "shipping": ["Κόστος αποστολής σε όλη τη χώρα."]},
        name="greek",
    )
    _found_first_by_words(
        tenant,
        [
            (russian, "где мой заказ", "orders"),  # "заказов" on the page
            (russian, "пароль не подходит", "password"),  # "пароля" on the page
            (arabic, "كيف أعدل حسابي", "account"),  # "الحساب" on the page
            (arabic, "كم شحن الطلب", "shipping"),  # "الشحن" on the page
            (greek, "πώς διαγράφω τον λογαριασμό μου", "account"),  # "λογαριασμού" on the page
            (greek, "ποσο κοστιζει η αποστολη", "shipping"),  # typed without accents: "Κόστος αποστολής"
        ],
    )
    (hit, *_) = _search(tenant, russian, "где мой заказ", retrieval_mode=RetrievalMode.FULL_TEXT)
    assert hit.text == "Отслеживание заказов доступно в личном кабинете."


@pytest.mark.django_db
def test_a_knowledge_base_in_a_latin_script_language_is_found_by_its_words_in_any_form(
    milvus_server, tenant, api_client
):
    """A knowledge base in a language written in Latin letters names it: its words are read as their stems in it, its
    function words left out, accents as users leave them out. Under `english` the question shares no word with the
    page: "pedido" is not "pedidos" there."""
    pages = {
        "returns": ["Devoluciones de los pedidos: tienes 30 días desde la entrega."],
        "shipping": ["Gastos de envío de la tienda a Canarias y Baleares."],
    }
    spanish = indexed_kb(tenant, pages, name="spanish", text_analyzer=TextAnalyzer.SPANISH)
    english = indexed_kb(tenant, pages, name="as-english")
    _found_first_by_words(
        tenant,
        [
            (spanish, "como devuelvo un pedido", "returns"),  # "Devoluciones", "pedidos" on the page; no accent typed
            (spanish, "cuanto cuesta el envio", "shipping"),  # "envío"
        ],
    )
    assert _search(tenant, english, "como devuelvo un pedido", retrieval_mode=RetrievalMode.FULL_TEXT) == []
    # Languages the multilingual model does not read, which BM25 carries: their case endings and accents the same way.
    czech = indexed_kb(tenant, {"orders": ["Sledování objednávek v aplikaci."]}, name="cs", text_analyzer="czech")
    hungarian = indexed_kb(
        tenant, {"orders": ["Rendelések nyomon követése a fiókban."]}, name="hu", text_analyzer="hungarian"
    )
    romanian = indexed_kb(
        tenant, {"cancel": ["Anularea comenzilor plătite se face din cont."]}, name="ro", text_analyzer="romanian"
    )
    serbian = indexed_kb(tenant, {"orders": ["Праћење поруџбина у апликацији."]}, name="sr", text_analyzer="serbian")
    _found_first_by_words(
        tenant,
        [
            (czech, "kde je moje objednávka", "orders"),  # "objednávek" on the page
            (hungarian, "hol van a rendelésem", "orders"),  # "Rendelések"
            (romanian, "vreau sa anulez o comanda platita", "cancel"),  # "Anularea", "plătite"; no diacritics typed
            (serbian, "gde je moja porudžbina", "orders"),  # the page in Cyrillic: "Праћење поруџбина"
        ],
    )
    # Through the API, a knowledge base is made with its language and reads it back; an unknown one is refused.
    made = api_client.post("/api/v1/knowledge-bases/", {"name": "fr", "text_analyzer": "french"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["text_analyzer"] == "french"
    refused = api_client.post("/api/v1/knowledge-bases/", {"name": "tlh", "text_analyzer": "klingon"}, format="json")
    assert refused.status_code == 400
    assert "klingon" in refused.content.decode()


def test_every_analyser_a_knowledge_base_may_name_writes_a_text_field():
    assert set(TextAnalyzer.values) == set(vectorstore.ANALYZERS)
    assert {vectorstore.text_field_analyzer(a) for a in TextAnalyzer.values} == set(vectorstore.TEXT_FIELDS)
    with pytest.raises(ValueError, match="klingon"):
        vectorstore.text_field_analyzer("klingon")


@pytest.mark.django_db
def test_a_hybrid_search_of_a_question_the_model_cannot_read_ranks_by_its_words_alone(
    milvus_server, tenant, api_client
):
    """The bundled model reads Thai and Chinese as unknown pieces: such a question's vector is next to every other
    unread text's, and fused with BM25 it moved the pages the question's words found out of their places. A hybrid
    search of it runs in full_text and says so; one the model reads stays hybrid, and a semantic search runs as
    asked."""
    knowledge_base = indexed_kb(
        tenant,
        {
            "password": ["หากลืมรหัสผ่าน กรุณากดลิงก์รีเซ็ตในหน้าเข้าสู่ระบบ", "Reset a forgotten password from the sign-in page."],
            "shipping": ["ค่าจัดส่งสินค้า 50 บาททั่วประเทศ", "Shipping costs 50 baht anywhere in the country."],
        },
        name="thai-english",
        retrieval_mode=RetrievalMode.HYBRID,
    )
    assert knowledge_base.embedding_model in ("", "all-MiniLM-L6-v2")
    url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/search/"
    for query, mode in (
        ("ลืมรหัสผ่านทำไงดี", "full_text"),
        ("I forgot my password", "hybrid"),
    ):
        body = api_client.post(url, {"query": query, "limit": 5}, format="json").json()
        assert body["retrieval_mode"] == mode, query
        assert body["results"][0]["document_external_id"] == "password", query
    asked = api_client.post(url, {"query": "ลืมรหัสผ่านทำไงดี", "retrieval_mode": "semantic"}, format="json").json()
    assert asked["retrieval_mode"] == "semantic"
    assert embeddings.text_readable("ลืมรหัสผ่านทำไงดี", "all-MiniLM-L6-v2") is False


@pytest.mark.parametrize(
    ("text", "analyzer", "held"),
    [
        ("退款審核通過後到帳", "chinese", "退款审核通过后到帐"),
        ("退款审核通过后到账", "chinese", "退款审核通过后到账"),
        ("電話番号を教えてください", "chinese", "電話番号を教えてください"),  # Japanese keeps its kanji
        ("退款審核通過後到帳", "english", "退款 款審 審核 核通 通過 過後 後到 到帳"),  # pairs, as written
        ("電話番号を教えてください", "english", "電話 話番 番号 号を を教 教え"),
        ("Rotate the ＡＰＩ key within ２４ hours，today", "english", "Rotate the API key within 24 hours，today"),
        ("重置ＡＰＩ密鑰", "chinese", "重置API密钥"),
        ("Восстановление пароля", "english", "восстановлен парол"),  # stems, then the field's English rules
        ("पासवर्ड बदलें", "english", "पआसवरड बदल"),  # the Hindi stem, then its vowel signs as letters
    ],
)
def test_a_chunks_bm25_field_holds_full_width_forms_as_ascii_and_chinese_in_simplified_characters(text, analyzer, held):
    assert vectorstore.bm25_document_text(text, analyzer) == held


@pytest.mark.parametrize(
    ("query", "analyzer", "sent"),
    [
        ("公園在哪裡", "chinese", "公园在哪里"),
        ("公园在哪里", "chinese", "公园在哪里"),
        ("where is the park", "chinese", "where is the park"),
        ("公園在哪裡", "english", "公園 園在 在哪 哪裡"),
        # Japanese keeps its kanji, as its pages do.
        ("電話番号を教えてください", "chinese", "電話番号を教えてください"),
        ("reset my ＡＰＩ key", "english", "reset my API key"),
        ("重置ＡＰＩ密鑰", "chinese", "重置API密钥"),
        ("reset my API key", "english", "reset my API key"),
    ],
)
def test_a_bm25_query_is_given_as_a_chunks_field_reads_its_text(query, analyzer, sent):
    """Read as the field is, each word once: given in both spellings, the words a Traditional query shares with its
    Simplified one weighed twice, and its FAQ retrieval fell 0.01-0.02 under the same query in Simplified characters."""
    assert vectorstore.bm25_query(query, analyzer) == sent


@pytest.mark.django_db
def test_the_tenant_filter_holds_in_full_text_and_hybrid(milvus_server, tenant, other_tenant):
    mine = indexed_kb(tenant, {"printing": SUPPORT["printing"]}, name="mine")
    indexed_kb(other_tenant, SUPPORT, name="theirs")

    for mode in (RetrievalMode.FULL_TEXT, RetrievalMode.HYBRID):
        hits = _search(tenant, mine, f"what does {ERROR_CODE} mean", retrieval_mode=mode)
        assert {hit.document_external_id for hit in hits} <= {"printing"}


@pytest.fixture
def legacy_deployment(milvus_server, settings):
    """A deployment whose MILVUS_COLLECTION is a collection of vectors only, as an earlier release made it."""
    name = f"{settings.MILVUS_COLLECTION}_legacy"
    settings.MILVUS_COLLECTION = name
    milvus.reset()
    milvus.collection_setup(
        name=name, primary="chunk_id", int_fields=("knowledge_base_id", vectorstore.DOC_FIELD), dimension=384
    )
    milvus.reset()
    yield name
    for collection in (name, f"{name}_text"):
        milvus.connect().drop_collection(collection)
    milvus.reset()


@pytest.mark.django_db
def test_a_knowledge_base_from_before_full_text_is_semantic_until_moved_online(legacy_deployment, tenant, api_client):
    knowledge_base = KnowledgeBase.objects.create(
        tenant=tenant, name="old", retrieval_mode=RetrievalMode.SEMANTIC, text_index=TextIndexStatus.MISSING
    )
    chunks = []
    for external_id, texts in SUPPORT.items():
        document = Document.objects.create(
            tenant=tenant,
            knowledge_base=knowledge_base,
            title=external_id,
            external_id=external_id,
            source_kind=SourceKind.CHUNKS,
            status=DocumentStatus.INDEXED,
            chunk_count=len(texts),
        )
        chunks += [
            Chunk.objects.create(
                tenant=tenant,
                document=document,
                knowledge_base=knowledge_base,
                position=position,
                text=text,
                token_count=10,
                content_hash=chunk_hash(text),
            )
            for position, text in enumerate(texts)
        ]
    chunk_vectors_upsert(chunks=chunks, vectors=embed_texts([c.text for c in chunks]), dimension=384)
    assert vectorstore.chunk_collection_name(full_text=True) == f"{legacy_deployment}_text"
    assert vectorstore.vectors_count(
        tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=384, full_text=False
    ) == len(chunks)

    url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/"
    body = api_client.get(url).json()
    assert (body["text_index"], body["effective_retrieval_mode"]) == ("missing", "semantic")
    refused = api_client.post(f"{url}search/", {"query": ERROR_CODE, "retrieval_mode": "full_text"}, format="json")
    assert refused.status_code == 409
    assert refused.json()["extra"]["code"] == "full_text_unavailable"
    assert "manage.py text_index" in refused.json()["message"]
    assert api_client.patch(url, {"retrieval_mode": "hybrid"}, format="json").status_code == 409
    with pytest.raises(FullTextUnavailableError):
        _search(tenant, knowledge_base, ERROR_CODE, retrieval_mode=RetrievalMode.HYBRID)
    assert _search(tenant, knowledge_base, "the battery does not charge")  # semantic, as before

    call_command("text_index", "--inline", "--tenant", tenant.slug)

    knowledge_base.refresh_from_db()
    assert (knowledge_base.text_index, knowledge_base.text_index_progress) == (TextIndexStatus.READY, 1.0)
    assert (
        vectorstore.vectors_count(
            tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=384, full_text=False
        )
        == 0
    )
    assert vectorstore.vectors_count(tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=384) == len(
        chunks
    )
    hits = _search(tenant, knowledge_base, f"what does {ERROR_CODE} mean", retrieval_mode=RetrievalMode.FULL_TEXT)
    assert _external_ids(hits)[0] == "codes"
    assert api_client.patch(url, {"retrieval_mode": "hybrid"}, format="json").json()["effective_retrieval_mode"] == (
        "hybrid"
    )


@pytest.mark.django_db
def test_a_chunk_written_while_its_knowledge_base_moves_goes_to_both_collections(legacy_deployment, tenant):
    knowledge_base = indexed_kb(tenant, {"printing": SUPPORT["printing"]}, name="moving")
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).update(text_index=TextIndexStatus.BUILDING)
    chunk = Chunk.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).first()

    chunk_vectors_upsert(chunks=[chunk], vectors=embed_texts([chunk.text]), dimension=384)

    for full_text in (False, True):
        count = vectorstore.vectors_count(
            tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk, dimension=384, full_text=full_text
        )
        assert count >= 1, full_text


@pytest.mark.django_db
def test_a_move_whose_run_was_lost_is_queued_again_by_the_sweep_once_its_lease_runs_out_and_finishes(
    legacy_deployment, tenant, monkeypatch, django_capture_on_commit_callbacks
):
    from retrieval import tasks

    knowledge_base = indexed_kb(
        tenant,
        {"codes": SUPPORT["codes"], "power": SUPPORT["power"]},
        name="lost-move",
        retrieval_mode=RetrievalMode.SEMANTIC,
        text_index=TextIndexStatus.MISSING,
    )
    # Started, and its task never run: what a worker killed mid-move, or a message lost, leaves behind.
    knowledge_base_text_index_start(tenant=tenant, knowledge_base=knowledge_base, queue=False)
    knowledge_base.refresh_from_db()
    assert knowledge_base.text_index == TextIndexStatus.BUILDING
    assert knowledge_base.text_index_lease_expires_at > timezone.now()
    queued = []
    monkeypatch.setattr(tasks.knowledge_base_text_index, "delay", lambda *args: queued.append(args))

    assert knowledge_base_text_indexes_recover() == 0, "a live lease must not be taken over"
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=knowledge_base.pk).update(
        text_index_lease_expires_at=timezone.now() - timedelta(seconds=1)  # the clock is moved, not waited for
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert knowledge_base_text_indexes_recover() == 1
    assert knowledge_base_text_indexes_recover() == 0, "queued again once, with a new lease"

    assert queued == [(knowledge_base.pk, tenant.pk)]
    knowledge_base.refresh_from_db()
    assert (knowledge_base.text_index_attempts, knowledge_base.text_index) == (1, TextIndexStatus.BUILDING)
    assert "queued again" in knowledge_base.text_index_error
    knowledge_base_text_index(tenant_id=tenant.pk, knowledge_base_id=knowledge_base.pk)  # what the queued task runs
    knowledge_base.refresh_from_db()
    assert (knowledge_base.text_index, knowledge_base.text_index_error) == (TextIndexStatus.READY, "")
    assert knowledge_base.text_index_lease_expires_at is None
    hits = _search(tenant, knowledge_base, ERROR_CODE, retrieval_mode=RetrievalMode.FULL_TEXT)
    assert _external_ids(hits)[0] == "codes"


@pytest.mark.django_db
def test_a_move_lost_too_often_is_given_up_with_the_reason_and_left_to_the_operator(tenant, settings, monkeypatch):
    from retrieval import tasks

    expired = timezone.now() - timedelta(seconds=1)
    lost_often = KnowledgeBase.objects.create(
        tenant=tenant,
        name="lost-often",
        text_index=TextIndexStatus.BUILDING,
        text_index_lease_expires_at=expired,
        text_index_attempts=settings.INGEST_MAX_ATTEMPTS,
    )
    # Stopped for good (e.g. refused: another model's vectors): no lease, so the sweep leaves it alone.
    stopped = KnowledgeBase.objects.create(
        tenant=tenant, name="stopped", text_index=TextIndexStatus.BUILDING, text_index_error="refused"
    )
    moved = KnowledgeBase.objects.create(tenant=tenant, name="moved", text_index_lease_expires_at=expired)
    monkeypatch.setattr(tasks.knowledge_base_text_index, "delay", lambda *args: pytest.fail(f"queued {args}"))

    assert knowledge_base_text_indexes_recover() == 0

    lost_often.refresh_from_db()
    assert (lost_often.text_index, lost_often.text_index_lease_expires_at) == (TextIndexStatus.BUILDING, None)
    assert "interrupted" in lost_often.text_index_error and "manage.py text_index" in lost_often.text_index_error
    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=stopped.pk).text_index_error == "refused"
    assert KnowledgeBase.objects.for_tenant(tenant).get(pk=moved.pk).text_index == TextIndexStatus.READY
