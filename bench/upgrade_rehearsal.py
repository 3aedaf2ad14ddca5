"""Upgrade rehearsal: what an operator's upgrade from the last release to this checkout does to real state.

A checkout of the last release (`--old`, e.g. `git worktree add ../wt-old affe8e2`, its `.venv` linked to this one's)
migrates a fresh PostgreSQL database and puts state in through its own code: two tenants (question dedup in session
and in tenant scope), knowledge bases with a document holding a long hex run, indexed by that release's service in
process, conversations whose turns leave hot copies in Redis, a knowledge base whose re-index failed, and one document
whose indexing task waits in the broker in that release's message format. Then this checkout migrates the same
database (timed) and checks, against the same database, Redis and Milvus:

  a. the migrations apply cleanly and quickly, no model change lacks one, and the old release's code, which goes on
     serving until its processes restart, still writes turns, documents, chunks and knowledge bases;
  b. the old hot copies are rebuilt from the rows, not misread (a turn writes one of the current version);
  c. old QA pairs are served as docs/conversations.md says (taken as answered from a complete index), until their
     source chunks change (docs/ingestion.md, "Upgrading from a release that stored chunk text broken");
  d. searches of the old knowledge bases are served (`index.status` "current"): the model did not change;
  e. re-indexing the document with the long run stores its chunks as written, encoding nothing (the cache), while a
     knowledge-base re-index keeps the rows as the old release stored them (and the pairs citing them served);
  f. the old release's task messages (a document's, without `queue_token`, and a knowledge-base re-index's) are run
     by this checkout's worker;
  g. the knowledge base whose re-index failed is refused as retrieval 0012 says, and served again once re-indexed.

Every check prints PASS or FAIL with what it saw; the exit status is 1 when any failed.

    .venv/bin/python bench/upgrade_rehearsal.py --old ../wt-old --database upgrade_rehearsal \
        --redis redis://127.0.0.1:6379/9

The database is dropped and created afresh (refused for a name not starting with "upgrade_"), the Redis db is flushed
(refused for db 0), a `milvus-lite server` is started on a free port with a data directory of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW_ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

HEX_RUN = hashlib.sha512(b"release-2026-11").hexdigest() + hashlib.sha512(b"tail").hexdigest()[:122]
DOCUMENT = (
    "Release notes for the storage gateway.\n\n"
    "The gateway now verifies every archive it restores against the digest published with the release.\n\n"
    f"Checksum of the release archive: {HEX_RUN}\n\n"
    "Older archives keep the digest they were published with; nothing has to be downloaded again.\n\n"
    "To reset a forgotten password, open the sign-in page, choose 'Forgot password' and follow the link sent to "
    "your e-mail address within fifteen minutes.\n"
)
HANDBOOK = (
    "Refunds are paid to the card used for the purchase within five working days of the return being received.\n\n"
    "Support answers e-mail within one working day; urgent outages are taken by phone around the clock.\n"
)
QUESTION = "What is the checksum of the release archive?"
OTHER_QUESTION = "How are refunds paid?"


# --- the orchestrator (any interpreter that can start the two checkouts) ---------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _run(args: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(args, cwd=cwd, env=env, check=False)
    if result.returncode:
        raise SystemExit(f"{' '.join(args)} (in {cwd}) exited {result.returncode}")
    return time.perf_counter() - started


def _database_fresh(postgres: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{postgres}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')


def orchestrate(args: argparse.Namespace) -> int:
    if not args.database.startswith("upgrade_"):
        raise SystemExit("--database must start with 'upgrade_': it is dropped and created afresh")
    if args.redis.rstrip("/").endswith("/0"):
        raise SystemExit("--redis must not be db 0: it is flushed")
    old_root = Path(args.old).resolve()
    _database_fresh(args.postgres, args.database)
    import redis

    redis.Redis.from_url(args.redis).flushdb()
    work = Path(tempfile.mkdtemp(prefix="upgrade-rehearsal-"))
    run_id = os.urandom(4).hex()
    port = _free_port()
    milvus_log = open(work / "milvus.log", "ab")
    milvus = subprocess.Popen(
        [str(BIN / "milvus-lite"), "server", "--data-dir", str(work / "milvus"), "--host", "127.0.0.1"]
        + ["--port", str(port)],
        stdout=milvus_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _port_open(port):
            if milvus.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"milvus-lite server did not start: {work / 'milvus.log'}")
            time.sleep(0.2)
        env = dict(os.environ)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "kbplatform.settings.base",
                "DATABASE_URL": f"{args.postgres}/{args.database}",
                "REDIS_URL": args.redis,
                "MILVUS_URI": f"http://127.0.0.1:{port}",
                "MILVUS_COLLECTION": f"upgrade_{run_id}",
                "CELERY_TASK_DEFAULT_QUEUE": f"upgrade-{run_id}",
                "KB_CACHE_PREFIX": f"upgrade-{run_id}",
                "KB_VAR_DIR": str(work / "var"),
                "KB_RATE_LIMIT": "",
                "LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1",
            }
        )
        python = str(BIN / "python")
        state = work / "state.json"
        print(f"work directory {work}; old release {old_root}; this checkout {NEW_ROOT}", flush=True)
        seconds = _run([python, "manage.py", "migrate", "--verbosity", "0"], cwd=old_root, env=env)
        print(f"old release: migrate from empty {seconds:.1f} s", flush=True)
        _run(
            [python, __file__, "--phase", "old", "--root", str(old_root), "--state", str(state)], cwd=old_root, env=env
        )
        _run([python, "manage.py", "showmigrations", "--plan"], cwd=NEW_ROOT, env=env) if args.verbose else None
        seconds = _run([python, "manage.py", "migrate"], cwd=NEW_ROOT, env=env)
        print(f"this checkout: migrate over the old release's state {seconds:.1f} s", flush=True)
        _run([python, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=NEW_ROOT, env=env)
        old_after = subprocess.run(
            [python, __file__, "--phase", "old-after-migrate", "--root", str(old_root), "--state", str(state)],
            cwd=old_root,
            env=env,
            check=False,
        )
        result = subprocess.run(
            [python, __file__, "--phase", "new", "--root", str(NEW_ROOT), "--state", str(state)],
            cwd=NEW_ROOT,
            env={**env, "KB_MIGRATE_SECONDS": f"{seconds:.2f}"},
            check=False,
        )
        failed = bool(result.returncode or old_after.returncode)
        print("rehearsal FAILED" if failed else "rehearsal passed", flush=True)
        return int(failed)
    finally:
        os.killpg(milvus.pid, signal.SIGTERM)
        milvus.wait(timeout=30)
        milvus_log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


# --- the phases (run inside one checkout, with its code) ----------------------------------------------------------


def _django(root: Path) -> None:
    sys.path.insert(0, str(root))
    os.chdir(root)
    import django

    django.setup()


def _client(raw_key: str):  # noqa: ANN202
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return client


def _post(client, path: str, body: dict, expect: int = 200) -> dict:  # noqa: ANN001
    response = client.post(path, body, format="json")
    if response.status_code != expect:
        raise AssertionError(f"POST {path} {body}: {response.status_code} {response.content[:600]!r}")
    return response.json()


def _ask(client, conversation_id: int, question: str) -> dict:  # noqa: ANN001
    return _post(client, f"/api/v1/conversations/{conversation_id}/messages/", {"question": question})


def phase_old(state_path: Path) -> None:
    """Everything through the old release's code, as its web and workers would have written it."""
    from conversations.models import DedupScope
    from conversations.services import dedup_policy_update
    from kbplatform.celery import app
    from retrieval import services
    from retrieval.models import Chunk, DocumentStatus, KnowledgeBase
    from tenants.scopes import SCOPE_ORDER
    from tenants.services import api_key_create, tenant_get_or_create

    out: dict = {"tenants": {}}
    for slug, scope in (("session-scope", DedupScope.SESSION), ("tenant-scope", DedupScope.TENANT)):
        tenant = tenant_get_or_create(slug=slug, name=slug)[0]
        dedup_policy_update(tenant=tenant, scope=scope)
        raw_key = api_key_create(tenant=tenant, name="rehearsal", scopes=SCOPE_ORDER)[1]
        kb = services.knowledge_base_create(tenant=tenant, name="notes", chunk_max_tokens=200, chunk_overlap_tokens=0)
        documents = [
            services.document_create(tenant=tenant, knowledge_base=kb, title="release notes", text=DOCUMENT),
            services.document_create(tenant=tenant, knowledge_base=kb, title="handbook", text=HANDBOOK),
        ]
        run = services.documents_index(tenant_id=tenant.pk, document_ids=[d.pk for d in documents])
        assert sorted(run.indexed) == sorted(d.pk for d in documents), run
        hex_chunks = list(
            Chunk.objects.for_tenant(tenant).filter(document=documents[0]).values_list("pk", "text", "content_hash")
        )
        assert not any(HEX_RUN in text for _, text, _ in hex_chunks), "the old release stored long runs unbroken"
        client = _client(raw_key)
        conversations = []
        for _ in range(2):
            conversation = _post(client, "/api/v1/conversations/", {"knowledge_base": kb.pk}, expect=201)["id"]
            asked = [_ask(client, conversation, QUESTION), _ask(client, conversation, OTHER_QUESTION)]
            conversations.append({"id": conversation, "turns": asked})
        out["tenants"][slug] = {
            "id": tenant.pk,
            "key": raw_key,
            "kb": kb.pk,
            "hex_document": documents[0].pk,
            "hex_chunks": hex_chunks,
            "conversations": conversations,
        }

    # A knowledge base whose re-index failed (its retries ran out), as the old release leaves it.
    tenant = tenant_get_or_create(slug="session-scope")[0]
    failing = services.knowledge_base_create(tenant=tenant, name="failing", chunk_max_tokens=200)
    document = services.document_create(tenant=tenant, knowledge_base=failing, title="handbook", text=HANDBOOK)
    services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=failing)
    services.knowledge_base_reindex_fail(
        tenant_id=tenant.pk, knowledge_base_id=failing.pk, reason="Milvus unavailable: connection refused"
    )
    failing.refresh_from_db()
    assert failing.reindex_status == "failed", failing.reindex_status
    out["failed_reindex_kb"] = failing.pk
    # One whose re-index is queued at the upgrade (its task waits in the broker).
    reindexing = services.knowledge_base_create(tenant=tenant, name="reindexing", chunk_max_tokens=200)
    document = services.document_create(tenant=tenant, knowledge_base=reindexing, title="handbook", text=HANDBOOK)
    services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
    # No worker ran: drop the messages of what was indexed in process, then queue a document and a re-index in the old
    # release's message format.
    purged = app.control.purge()
    services.knowledge_base_reindex_start(tenant=tenant, knowledge_base=reindexing)
    out["queued_reindex_kb"] = reindexing.pk
    queued = services.document_create(tenant=tenant, knowledge_base=failing, title="queued", text="Queued at upgrade.")
    assert queued.status == DocumentStatus.QUEUED
    out["queued_document"] = queued.pk
    out["purged_messages"] = purged
    out["kb_model_identity"] = KnowledgeBase.objects.for_tenant(tenant).get(pk=failing.pk).embedding_model_identity
    state_path.write_text(json.dumps(out))
    print(f"old release: state written ({purged} stale task messages purged, 2 left queued)", flush=True)


def phase_old_after_migrate(state_path: Path) -> int:
    """The old release's web and workers go on serving while `migrate` runs and until they restart
    (docs/operations.md): their writes, which leave out every column the new migrations add, must still land."""
    from retrieval import services
    from tenants.models import Tenant

    old = json.loads(state_path.read_text())
    session = old["tenants"]["session-scope"]
    failed = 0
    try:
        client = _client(session["key"])
        tenant = Tenant.objects.get(pk=session["id"])
        kb = services.knowledge_base_create(tenant=tenant, name="during-upgrade")
        document = services.document_create(tenant=tenant, knowledge_base=kb, title="handbook", text=HANDBOOK)
        run = services.documents_index(tenant_id=tenant.pk, document_ids=[document.pk])
        assert run.indexed == [document.pk], run
        conversation = _post(client, "/api/v1/conversations/", {"knowledge_base": kb.pk}, expect=201)["id"]
        _ask(client, conversation, OTHER_QUESTION)
        seen = f"knowledge base {kb.pk}, document {document.pk} indexed, conversation {conversation} answered"
    except Exception as exc:  # noqa: BLE001 - the rehearsal reports what the old code met
        failed, seen = 1, f"{type(exc).__name__}: {str(exc)[:300]}"
    print(f"{'FAIL' if failed else 'PASS'} a. the old release still writes after migrate: {seen}", flush=True)
    return failed


class Checks:
    def __init__(self) -> None:
        self.failed = 0

    def check(self, label: str, ok: bool, seen: object) -> None:
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label}: {seen}", flush=True)


def _worker_start(root: Path, queue: str) -> tuple[subprocess.Popen, Path]:
    log = Path(os.environ["KB_VAR_DIR"]).parent / "worker.log"
    process = subprocess.Popen(
        [str(BIN / "celery"), "-A", "kbplatform", "worker", "-Q", queue, "--concurrency", "1", "-l", "info"]
        + ["--without-gossip", "--without-mingle", "-n", f"upgrade-{os.getpid()}@%h"],
        cwd=root,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, log


def phase_new(root: Path, state_path: Path) -> int:  # one rehearsal, read top to bottom
    from django.conf import settings
    from django.db import connection

    from conversations.models import Conversation, Turn
    from conversations.turn.state import MAGIC, state_key, state_load
    from kbplatform.redis_client import redis_connection
    from retrieval import services
    from retrieval.models import (
        REINDEX_FROM_UNRECORDED,
        Chunk,
        Document,
        DocumentStatus,
        EmbeddingCacheEntry,
        KnowledgeBase,
    )
    from tenants.models import Tenant

    old = json.loads(state_path.read_text())
    checks = Checks()

    # a. migrations
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('chunk_tenant_model_input_hash')"
        )
        row = cursor.fetchone()
    seconds = float(os.environ.get("KB_MIGRATE_SECONDS", "nan"))
    checks.check("a. migrate over the old state", seconds < 60, f"{seconds:.2f} s, makemigrations --check clean")
    checks.check("a. chunk model-input-hash index valid", row == (True,), row)
    failing = KnowledgeBase.objects.unscoped().get(pk=old["failed_reindex_kb"])
    checks.check(
        "a. 0012 marks the failed re-index (the queued one: under f)",
        failing.reindex_from_model_identity == REINDEX_FROM_UNRECORDED,
        repr(failing.reindex_from_model_identity),
    )
    others = (
        KnowledgeBase.objects.unscoped()
        .exclude(pk__in=[failing.pk, old["queued_reindex_kb"]])
        .values_list("reindex_from_model_identity", flat=True)
    )
    checks.check("a. 0012 leaves the others blank", set(others) == {""}, set(others))

    # b. hot copies of the old release: read as unreadable, rebuilt from the rows; a new turn writes the current one.
    redis = redis_connection()
    for slug, tenant_state in old["tenants"].items():
        for conversation_state in tenant_state["conversations"]:
            conversation = Conversation.objects.for_tenant(tenant_state["id"]).get(pk=conversation_state["id"])
            raw = redis.get(state_key(tenant_id=tenant_state["id"], conversation_id=conversation.pk))
            loaded = state_load(conversation=conversation)
            rows = list(
                Turn.objects.for_tenant(tenant_state["id"])
                .filter(conversation=conversation)
                .order_by("number")
                .values_list("pk", "partial_index")
            )
            checks.check(
                f"b. {slug} conversation {conversation.pk}: old copy rebuilt from the rows",
                raw is not None
                and raw[:4] == b"KBS" + bytes([MAGIC[3] - 1])
                and loaded.source == "database"
                and [(t.turn_id, t.partial_index) for t in loaded.recent_turns] == rows,
                f"copy version {raw[3] if raw else None}, loaded from {loaded.source}, turns {rows}",
            )

    session = old["tenants"]["session-scope"]
    tenant_scope = old["tenants"]["tenant-scope"]
    session_client, tenant_client = _client(session["key"]), _client(tenant_scope["key"])
    first = session["conversations"][0]

    # c. old pairs: served (taken as answered from a complete index), in session and tenant scope.
    served = _ask(session_client, first["id"], QUESTION)
    checks.check(
        "c. session scope: an old pair is served",
        served["dedup"]["action"] == "served_cached" and served["dedup"]["matched_turn_id"] is not None,
        served["dedup"],
    )
    raw = redis.get(state_key(tenant_id=session["id"], conversation_id=first["id"]))
    checks.check(
        "b. a new turn writes the current copy", raw is not None and raw[:4] == MAGIC, raw[:4] if raw else None
    )
    conversation = _post(tenant_client, "/api/v1/conversations/", {"knowledge_base": tenant_scope["kb"]}, expect=201)
    served = _ask(tenant_client, conversation["id"], QUESTION)
    old_turns = {turn["turn_id"] for c in tenant_scope["conversations"] for turn in c["turns"]}
    checks.check(
        "c. tenant scope: an old pair of another conversation is served",
        served["dedup"]["action"] == "served_cached" and served["dedup"]["matched_turn_id"] in old_turns,
        served["dedup"],
    )

    # d. searches of the old knowledge bases: the model did not change.
    for slug, tenant_state in old["tenants"].items():
        found = _post(
            _client(tenant_state["key"]),
            f"/api/v1/knowledge-bases/{tenant_state['kb']}/search/",
            {"query": HEX_RUN, "group_by_document": False},
        )
        checks.check(
            f"d. {slug}: search of the old knowledge base served",
            found["index"]["status"] == "current" and found["results"],
            {"index": found["index"], "results": len(found["results"])},
        )
    health = session_client.get("/api/health/").json()["components"]["embedding_model"]
    checks.check(
        "d. health counts only the failed re-index as awaiting one",
        health["status"] == "reindex_needed" and "; 1 knowledge base(s)" in health["detail"],
        health,
    )

    # f. the old release's task messages (no queue_token) run by this checkout's worker; the re-index queued at the
    # upgrade (marked by 0012, searches served flagged meanwhile) finishes and clears its mark.
    reindexing = KnowledgeBase.objects.unscoped().get(pk=old["queued_reindex_kb"])
    found = _post(session_client, f"/api/v1/knowledge-bases/{reindexing.pk}/search/", {"query": OTHER_QUESTION})
    checks.check(
        "f. a re-index queued at the upgrade: marked, searches served flagged",
        reindexing.reindex_from_model_identity == REINDEX_FROM_UNRECORDED and found["index"]["status"] == "reindexing",
        f"mark {reindexing.reindex_from_model_identity!r}, index {found['index']}",
    )
    worker, log = _worker_start(root, settings.CELERY_TASK_DEFAULT_QUEUE)
    try:
        deadline = time.monotonic() + 120
        queued = Document.objects.unscoped().get(pk=old["queued_document"])
        while time.monotonic() < deadline and (
            queued.status != DocumentStatus.INDEXED or reindexing.reindex_status == "running"
        ):
            time.sleep(1)
            queued.refresh_from_db()
            reindexing.refresh_from_db()
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    errors = [line for line in log.read_text().splitlines() if "ERROR" in line or "Traceback" in line]
    checks.check(
        "f. an old-format task message is run by the new worker",
        queued.status == DocumentStatus.INDEXED and not errors,
        f"document {queued.pk} {queued.status} {queued.error_message!r}; worker errors {errors[:3]} ({log})",
    )
    found = _post(session_client, f"/api/v1/knowledge-bases/{reindexing.pk}/search/", {"query": OTHER_QUESTION})
    checks.check(
        "f. the re-index queued at the upgrade ran: its mark cleared, searches current",
        reindexing.reindex_status == "done"
        and reindexing.reindex_from_model_identity == ""
        and found["index"]["status"] == "current",
        f"status {reindexing.reindex_status}, mark {reindexing.reindex_from_model_identity!r}, index {found['index']}",
    )

    # e. re-index of the document with the long run: chunks as written, nothing encoded.
    tenant = Tenant.objects.get(pk=session["id"])
    entries = EmbeddingCacheEntry.objects.for_tenant(tenant).count()
    _post(session_client, f"/api/v1/documents/{session['hex_document']}/reindex/", {}, expect=202)
    run = services.documents_index(tenant_id=tenant.pk, document_ids=[session["hex_document"]])
    chunks = list(Chunk.objects.for_tenant(tenant).filter(document_id=session["hex_document"]).order_by("position"))
    old_ids = {pk for pk, _, _ in session["hex_chunks"]}
    checks.check(
        "e. re-index indexed the document, encoding nothing",
        run.indexed == [session["hex_document"]] and run.encoded == 0,
        f"indexed {run.indexed}, encoded {run.encoded}, chunks {run.chunks}",
    )
    checks.check(
        "e. the long run is stored as written, in new rows",
        any(HEX_RUN in chunk.text for chunk in chunks)
        and all(chunk.text in DOCUMENT for chunk in chunks)
        and not old_ids & {chunk.pk for chunk in chunks},
        [(chunk.pk, len(chunk.text), bool(chunk.model_input_hash)) for chunk in chunks],
    )
    checks.check(
        "e. the embedding cache gained no entry",
        EmbeddingCacheEntry.objects.for_tenant(tenant).count() == entries,
        f"{entries} -> {EmbeddingCacheEntry.objects.for_tenant(tenant).count()}",
    )
    found = _post(
        session_client,
        f"/api/v1/knowledge-bases/{session['kb']}/search/",
        {"query": QUESTION, "group_by_document": False},
    )
    checks.check(
        "e. search shows the checksum as written",
        any(HEX_RUN in hit["text"] for hit in found["results"][:2]),
        [hit["chunk_id"] for hit in found["results"]],
    )
    again = _ask(session_client, first["id"], QUESTION)
    checks.check(
        "c. an old pair whose chunks were replaced is no longer served",
        again["dedup"]["action"] != "served_cached" and any(HEX_RUN in s["text"] for s in again["sources"]),
        again["dedup"],
    )

    # e. a knowledge-base re-index over rows the old release stored broken: vectors from the cache, rows kept (so the
    # pairs citing them are still served).
    other = Tenant.objects.get(pk=tenant_scope["id"])
    entries = EmbeddingCacheEntry.objects.for_tenant(other).count()
    _post(tenant_client, f"/api/v1/knowledge-bases/{tenant_scope['kb']}/reindex/", {}, expect=202)
    rebuilt = services.knowledge_base_reindex(tenant_id=other.pk, knowledge_base_id=tenant_scope["kb"])
    rows = list(
        Chunk.objects.for_tenant(other)
        .filter(document_id=tenant_scope["hex_document"])
        .values_list("pk", "text", "content_hash")
    )
    checks.check(
        "e. a knowledge-base re-index keeps the old rows and encodes nothing",
        rebuilt > 0
        and sorted(rows) == sorted(tuple(row) for row in tenant_scope["hex_chunks"])
        and EmbeddingCacheEntry.objects.for_tenant(other).count() == entries,
        f"rebuilt {rebuilt}, rows kept {sorted(rows) == sorted(tuple(r) for r in tenant_scope['hex_chunks'])}, "
        f"cache {entries} -> {EmbeddingCacheEntry.objects.for_tenant(other).count()}",
    )
    conversation = _post(tenant_client, "/api/v1/conversations/", {"knowledge_base": tenant_scope["kb"]}, expect=201)
    served = _ask(tenant_client, conversation["id"], QUESTION)
    checks.check(
        "c. tenant scope: the old pair is still served after the knowledge-base re-index",
        served["dedup"]["action"] == "served_cached",
        served["dedup"],
    )

    # g. the knowledge base whose re-index failed before the upgrade.
    response = session_client.post(
        f"/api/v1/knowledge-bases/{failing.pk}/search/", {"query": OTHER_QUESTION}, format="json"
    )
    body = response.json()
    checks.check(
        "g. a re-index failed before the upgrade: searches refused",
        response.status_code == 409
        and body["extra"]["code"] == "embedding_model_mismatch"
        and body["extra"]["reindex_from_model"] == REINDEX_FROM_UNRECORDED,
        f"{response.status_code} {body.get('message', '')[:160]!r}",
    )
    _post(session_client, f"/api/v1/knowledge-bases/{failing.pk}/reindex/", {}, expect=202)
    rebuilt = services.knowledge_base_reindex(tenant_id=tenant.pk, knowledge_base_id=failing.pk)
    failing.refresh_from_db()
    found = _post(session_client, f"/api/v1/knowledge-bases/{failing.pk}/search/", {"query": OTHER_QUESTION})
    checks.check(
        "g. re-indexed again: served, the mark cleared",
        rebuilt > 0
        and failing.reindex_status == "done"
        and failing.reindex_from_model_identity == ""
        and found["index"]["status"] == "current",
        f"rebuilt {rebuilt} chunks, status {failing.reindex_status}, index {found['index']}",
    )
    print(f"{'all checks passed' if not checks.failed else f'{checks.failed} checks FAILED'}", flush=True)
    return 1 if checks.failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="a checkout of the last release (its .venv may be a link to this one's)")
    parser.add_argument("--database", default="upgrade_rehearsal")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/9")
    parser.add_argument("--verbose", action="store_true", help="print the migration plan")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (Milvus data, logs)")
    parser.add_argument("--phase", choices=["old", "old-after-migrate", "new"], help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase is None:
        if not args.old:
            parser.error("--old is required")
        return orchestrate(args)
    root = Path(args.root)
    _django(root)
    if args.phase == "old":
        phase_old(Path(args.state))
        return 0
    if args.phase == "old-after-migrate":
        return phase_old_after_migrate(Path(args.state))
    return phase_new(root, Path(args.state))


if __name__ == "__main__":
    sys.exit(main())
