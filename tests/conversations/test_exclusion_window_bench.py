"""`manage.py exclusion_window_bench`: a row of figures per window size from real searches of a small knowledge base
in the session's `milvus-lite server`, nothing written, and the operator's mistakes refused with a message. The
window maths it rests on (`window_exclusion`, `windows_parse`, `search_rounds`) is tested directly."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from conversations.exclusion_window_bench import (
    NO_EXCLUSION,
    ShownItem,
    question_of_chunk,
    search_rounds,
    window_exclusion,
    windows_parse,
)
from conversations.models import ConsumedItem, DedupEvent, Granularity, Turn
from retrieval import milvus
from retrieval.models import Chunk, Document, KnowledgeBase
from tests.conversations.helpers import indexed_kb
from tests.factories import ConversationFactory, DedupPolicyFactory, TurnFactory
from tests.services import free_port

ROW = re.compile(
    r"^\s*(none|\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x\s+([\d.]+)\s+(\d+)%$", re.MULTILINE
)


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("exclusion_window_bench", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _rows(output: str) -> dict[str, tuple[float, ...]]:
    return {match[0]: tuple(float(value) for value in match[1:]) for match in ROW.findall(output)}


def _written() -> tuple[int, int, int]:
    return (
        Turn.objects.unscoped().count(),
        ConsumedItem.objects.unscoped().count(),
        DedupEvent.objects.unscoped().count(),
    )


@pytest.fixture
def handbook(milvus_server, tenant) -> KnowledgeBase:
    """The eight one-chunk handbook documents, and two stored questions of a conversation about it."""
    knowledge_base = indexed_kb(tenant)
    conversation = ConversationFactory(tenant=tenant, knowledge_base=knowledge_base)
    TurnFactory(tenant=tenant, conversation=conversation, question="How do I reset my password?")
    TurnFactory(tenant=tenant, conversation=conversation, question="What does the Team plan cost?")
    return knowledge_base


@pytest.mark.django_db
def test_prints_a_row_of_figures_per_window_and_writes_nothing(handbook, tenant):
    DedupPolicyFactory(tenant=tenant, granularity=Granularity.CHUNK)
    before = _written()

    output, progress = _run("--tenant", tenant.slug, "--kb", str(handbook.pk), "--windows", "1,2", "--queries", "4")

    assert _written() == before
    rows = _rows(output)
    assert set(rows) == {"none", "1", "2"}, output
    for _, _, p50, p95, ratio, _, _ in rows.values():
        assert 0 < p50 <= p95 and ratio > 0, output
    # Eight documents, five a turn: one turn's list holds the question's five best, two turns' every one there is.
    assert rows["none"][:2] == (0, 0) and rows["none"][5] == 5, output
    assert rows["1"][:2] == (5, 5) and rows["1"][5] == 3, output
    assert rows["2"][:2] == (8, 8) and rows["2"][5] == 0 and rows["2"][6] == 100, output
    assert "the 2 latest stored question(s) of the knowledge base, then 2 sampled chunk text(s)" in output, output
    assert "by chunk ids" in output and "searching" in progress, (output, progress)


@pytest.mark.django_db
def test_doc_granularity_excludes_document_ids(handbook, tenant):
    output, _ = _run(
        "--tenant", tenant.slug, "--kb", str(handbook.pk), "--windows", "1", "--queries", "2", "--repeats", "1",
        "--granularity", "doc",
    )  # fmt: skip
    assert "Benched by doc ids" in output, output
    assert _rows(output)["1"][:2] == (5, 5), output


@pytest.mark.django_db
def test_refuses_a_knowledge_base_of_another_tenant(handbook, tenant, other_tenant):
    with pytest.raises(CommandError, match=f"Tenant 'globex' has no knowledge base with id {handbook.pk}"):
        _run("--tenant", other_tenant.slug, "--kb", str(handbook.pk))


@pytest.mark.django_db
def test_refuses_an_unknown_tenant_a_missing_and_an_empty_knowledge_base(tenant):
    with pytest.raises(CommandError, match="No tenant with slug 'nobody'"):
        _run("--tenant", "nobody", "--kb", "1")
    with pytest.raises(CommandError, match="has no knowledge base with id 999999999"):
        _run("--tenant", tenant.slug, "--kb", "999999999")
    empty = KnowledgeBase.objects.create(tenant=tenant, name="empty")
    with pytest.raises(CommandError, match="holds no chunk"):
        _run("--tenant", tenant.slug, "--kb", str(empty.pk))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("windows", "says"),
    [
        ("1,five", "'five' is not a whole number"),
        ("0,5", "0 is outside 1..100"),
        ("101", "outside"),
        (",", "no window"),
    ],
)
def test_refuses_bad_windows(tenant, windows, says):
    with pytest.raises(CommandError, match=says):
        _run("--tenant", tenant.slug, "--kb", "1", "--windows", windows)


@pytest.mark.django_db
def test_refuses_a_knowledge_base_of_another_embedding_model(handbook, tenant):
    KnowledgeBase.objects.for_tenant(tenant).filter(pk=handbook.pk).update(
        embedding_model="another-model", embedding_model_identity="another-model:0123"
    )
    with pytest.raises(CommandError, match="scores between two models' vectors mean nothing"):
        _run("--tenant", tenant.slug, "--kb", str(handbook.pk))


@pytest.fixture
def milvus_down(settings):
    """MILVUS_URI pointing at a port nothing listens on, for this test only."""
    settings.MILVUS_URI = f"http://127.0.0.1:{free_port()}"
    settings.MILVUS_TIMEOUT = 2
    milvus.reset()
    yield
    milvus.reset()


@pytest.mark.django_db
def test_milvus_down_is_a_message(milvus_down, tenant):
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name="kb")
    document = Document.objects.create(tenant=tenant, knowledge_base=knowledge_base, title="d")
    Chunk.objects.create(
        tenant=tenant, document=document, knowledge_base=knowledge_base, position=0, text="x", token_count=1
    )
    with pytest.raises(CommandError, match="Milvus is unavailable .* Check MILVUS_URI"):
        _run("--tenant", tenant.slug, "--kb", str(knowledge_base.pk))


# --- the pure parts ---------------------------------------------------------------------------------------------


def test_windows_parse_sorts_and_drops_repeats():
    assert windows_parse(" 20,1, 5,5 ") == [1, 5, 20]
    for bad in ("", "0", "-1", "101", "2.5", "a"):
        with pytest.raises(ValueError):
            windows_parse(bad)


def _turn(*items: tuple[int, int]) -> list[ShownItem]:
    return [ShownItem(chunk_id, document_id, f"h{chunk_id}") for chunk_id, document_id in items]


def test_window_exclusion_takes_the_last_turns_of_the_window_by_granularity():
    shown = [_turn((1, 10), (2, 20)), _turn((3, 10)), _turn((4, 30))]
    assert window_exclusion(shown_turns=shown, window=NO_EXCLUSION, granularity=Granularity.CHUNK) == ([], set())
    assert window_exclusion(shown_turns=shown, window=1, granularity=Granularity.CHUNK) == ([4], {"h4"})
    assert window_exclusion(shown_turns=shown, window=2, granularity=Granularity.DOC) == ([10, 30], {"h3", "h4"})
    assert window_exclusion(shown_turns=shown, window=5, granularity=Granularity.DOC) == (
        [10, 20, 30],
        {"h1", "h2", "h3", "h4"},
    )


def test_search_rounds_put_every_size_once_in_each_round_in_changing_places():
    rounds = search_rounds(windows=[1, 5, 10, 20, 50], rounds=20, seed=3)
    assert all(sorted(order) == [NO_EXCLUSION, 1, 5, 10, 20, 50] for order in rounds)
    assert len({order.index(NO_EXCLUSION) for order in rounds}) > 1


def test_question_of_chunk_cuts_at_a_word():
    assert question_of_chunk("  short   text ") == "short text"
    assert question_of_chunk("word " * 100, max_chars=12) == "word word"
