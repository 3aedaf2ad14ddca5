"""`manage.py milvus_collections`: the operator's view of this deployment's Milvus collections, and the drop of the
question collections of embedding models no unexpired conversation uses any more (docs/operations.md, "Re-index
after a model change"). Against the session's `milvus-lite server`; the old models are made-up model ids, whose
collections are filled as the tenant-scope dedup fills them."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from conversations.dedup.question_collections import DeploymentCollection, collection_drop_refusal
from retrieval import milvus, question_index, vectorstore
from retrieval.embeddings import model_id
from tests.factories import ConversationFactory, TurnFactory
from tests.services import ROOT, free_port

DIMENSION = 384


def _questions_indexed(tenant, *, model: str, count: int) -> str:
    """`count` question vectors in the collection of `model`, as tenant-scope dedup indexes them; its name."""
    rows = [
        question_index.QuestionVector(
            turn_id=10_000 + number,
            tenant_id=tenant.pk,
            knowledge_base_id=1,
            created_ts=0,
            vector=[1.0] + [0.0] * (DIMENSION - 1),
        )
        for number in range(count)
    ]
    question_index.question_vectors_upsert(rows=rows, model=model)
    return question_index.question_collection_name(model=model)


def _turn(tenant, *, model: str, expires_in: timedelta):
    conversation = ConversationFactory(tenant=tenant, expires_at=timezone.now() + expires_in)
    return TurnFactory(tenant=tenant, conversation=conversation, question_vector_model=model)


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("milvus_collections", *args, stdout=out)
    return out.getvalue()


def _line(output: str, name: str) -> str:
    lines = [line for line in output.splitlines() if line.split() and line.split()[0] == name]
    assert len(lines) == 1, output
    return lines[0]


def _exists(name: str) -> bool:
    return name in milvus.call("list collections", milvus.connect().list_collections)


@pytest.fixture
def collections(milvus_server, tenant, other_tenant) -> dict[str, str]:
    """The chunk collection, the current model's question collection (3 questions), an old model's with a turn of an
    unexpired conversation (2 questions) and one whose conversations have all expired (1 question)."""
    vectorstore.collection_ensure(dimension=DIMENSION)
    names = {
        "chunks": settings.MILVUS_COLLECTION,
        "current": _questions_indexed(tenant, model=model_id(), count=3),
        "live": _questions_indexed(tenant, model="01d0000000a1", count=2),
        "expired": _questions_indexed(tenant, model="01d0000000b2", count=1),
    }
    _turn(tenant, model=model_id(), expires_in=timedelta(hours=1))
    _turn(tenant, model="01d0000000a1", expires_in=timedelta(hours=1))
    _turn(other_tenant, model="01d0000000a1", expires_in=timedelta(minutes=5))  # every tenant's turns count
    _turn(tenant, model="01d0000000a1", expires_in=timedelta(hours=-1))  # expired, not yet purged: not counted
    _turn(tenant, model="01d0000000b2", expires_in=timedelta(seconds=-1))
    return names


def test_the_list_names_each_collection_s_role_entities_and_live_turns(collections):
    output = _run()

    # The chunk collection and the current model's are shared with the session's other tests: their counts vary.
    assert _line(output, collections["chunks"]).split()[2] == "chunks"
    current = _line(output, collections["current"])
    assert int(current.split()[1]) >= 3 and f"model in use ({model_id()})" in current
    live = _line(output, collections["live"])
    assert live.split()[1] == "2" and "2 turns in 2 unexpired conversations" in live and "kept" in live
    expired = _line(output, collections["expired"])
    assert expired.split()[1] == "1" and "no unexpired turn" in expired and "may be dropped" in expired
    assert all(_exists(name) for name in collections.values()), "listing dropped something"


def test_drop_unused_drops_only_an_old_model_s_collection_no_live_turn_needs(collections):
    dry = _run("--drop-unused", "--dry-run")
    assert f"Would drop {collections['expired']}" in dry
    assert all(_exists(name) for name in collections.values())

    output = _run("--drop-unused")

    assert f"Dropped {collections['expired']}" in output
    assert not _exists(collections["expired"])
    assert all(_exists(collections[kind]) for kind in ("chunks", "current", "live"))
    assert "Dropped" not in _run("--drop-unused")  # nothing left to drop


def test_a_named_drop_is_refused_while_an_unexpired_turn_carries_the_model(collections):
    with pytest.raises(CommandError, match="2 turns in 2 unexpired conversations"):
        _run("--drop", collections["live"])
    assert _exists(collections["live"])


@pytest.mark.parametrize("kind", ["chunks", "current"])
def test_a_named_drop_of_a_collection_in_use_is_refused_and_drops_nothing(collections, kind):
    with pytest.raises(CommandError, match="refused") as refused:
        _run("--drop", collections["expired"], "--drop", collections[kind])
    assert collections[kind] in str(refused.value)
    assert all(_exists(name) for name in collections.values()), "a refused drop dropped something"


def test_a_named_drop_of_an_old_model_s_collection_without_live_turns_drops_it(collections):
    output = _run("--drop", collections["expired"])
    assert f"Dropped {collections['expired']}" in output and not _exists(collections["expired"])


def test_nothing_outside_the_deployment_s_naming_is_dropped(collections):
    outside = f"{settings.MILVUS_COLLECTION}_questions_extra"
    milvus.collection_setup(name=outside, primary="turn_id", int_fields=("created_ts",), dimension=4)
    try:
        assert "never dropped" in _line(_run(), outside)
        assert f"Dropped {outside}" not in _run("--drop-unused")
        for name in (outside, "someone_elses_collection"):
            with pytest.raises(CommandError, match="not one of this deployment's"):
                _run("--drop", name)
        assert _exists(outside)
    finally:
        milvus.call("drop", milvus.connect().drop_collection, outside)
        milvus._ready_collections.discard(outside)


def test_the_full_text_collection_beside_a_collection_of_vectors_only_is_a_chunk_collection_never_dropped(
    collections,
):
    beside = f"{settings.MILVUS_COLLECTION}_text"
    milvus.collection_setup(
        name=beside, primary="chunk_id", int_fields=("knowledge_base_id", vectorstore.DOC_FIELD), dimension=4
    )
    try:
        line = _line(_run(), beside)
        assert line.split()[2] == "chunks" and "full text" in line
        assert f"Dropped {beside}" not in _run("--drop-unused")
        with pytest.raises(CommandError, match="chunk collection"):
            _run("--drop", beside)
        assert _exists(beside)
    finally:
        milvus.call("drop", milvus.connect().drop_collection, beside)
        milvus.reset()  # forget the full-text collection this process may have looked up meanwhile


def test_dry_run_alone_is_refused(milvus_server):
    with pytest.raises(CommandError, match="--dry-run"):
        _run("--dry-run")


def test_milvus_down_is_a_message_and_exit_status_1_not_a_traceback():
    env = dict(
        os.environ, DJANGO_SETTINGS_MODULE="kbplatform.settings.test", MILVUS_URI=f"http://127.0.0.1:{free_port()}"
    )
    env["MILVUS_TIMEOUT"] = "2"
    result = subprocess.run(
        [sys.executable, "manage.py", "milvus_collections"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result
    assert "Milvus" in result.stderr and "unavailable" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def _collection(**fields) -> DeploymentCollection:
    values = {
        "name": "kb_questions_01d0000000a1",
        "entities": 5,
        "kind": "questions",
        "model": "01d0000000a1",
        "in_use": False,
        "live_conversations": 0,
        "live_turns": 0,
    }
    return DeploymentCollection(**{**values, **fields})


@pytest.mark.parametrize(
    ("fields", "refused_because"),
    [
        ({}, None),
        ({"model": ""}, None),  # from before models were recorded, its turns expired
        ({"entities": 0}, None),
        ({"kind": "chunks", "model": None, "in_use": True}, "chunk collection"),
        ({"in_use": True}, "model in use"),
        ({"in_use": True, "live_turns": 0}, "model in use"),
        ({"live_turns": 1, "live_conversations": 1}, "1 turn in 1 unexpired conversation"),
        ({"live_turns": 7, "live_conversations": 3}, "7 turns in 3 unexpired conversations"),
        ({"kind": "other", "model": None}, "not one of this deployment's"),
    ],
)
def test_drop_refusal(fields, refused_because):
    refusal = collection_drop_refusal(_collection(**fields))
    if refused_because is None:
        assert refusal is None
    else:
        assert refusal is not None and refused_because in refusal
