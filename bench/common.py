"""Shared set-up of the ingestion benchmarks: a private database, Milvus Lite server and Celery worker.

Each run uses `var/bench/` (SQLite, unless DATABASE_URL is set), a `milvus-lite server` on a free port with a
throw-away data directory, the local Redis as broker on a queue of its own, and one real Celery worker, so the
figures are those of the platform as deployed by `make run`, not of functions called in-process.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
SCIFACT = DATA / "scifact"
sys.path.insert(0, str(ROOT))
# Celery's Django fix-up puts the working directory first on sys.path: it must be the project root, or
# bench/conversations.py would shadow the conversations app.
os.chdir(ROOT)


milvus_process_id: int | None = None  # the running benchmark's milvus-lite server, for CPU accounting
milvus_server = None  # the running benchmark's tests.services.MilvusServer, for drills that stop and start it


def process_tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its live descendants, from /proc. Unlike wall
    time, this does not depend on what else the machine is running."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def server_like_client():  # noqa: ANN201 - DRF is imported once Django is set up
    """A DRF test client whose requests handle the database connection as Django's WSGI handler does under gunicorn:
    `close_old_connections` at the start and end of each request (the test client leaves both out), so a kept
    connection is health-checked before each request's first query (CONN_HEALTH_CHECKS) and closed once older than
    CONN_MAX_AGE. A latency figure then includes what a served request pays for its connection."""
    from django.db import close_old_connections
    from rest_framework.test import APIClient

    class ServerLikeClient(APIClient):
        def request(self, **request):  # noqa: ANN003, ANN202
            close_old_connections()
            try:
                return super().request(**request)
            finally:
                close_old_connections()

    return ServerLikeClient()


@contextmanager
def platform(*, name: str) -> Iterator[dict]:
    """Start Milvus and configure Django for a benchmark; yields the environment the worker must get."""
    from tests.services import MilvusServer

    var_dir = ROOT / "var" / "bench"
    var_dir.mkdir(parents=True, exist_ok=True)
    global milvus_process_id, milvus_server
    server = MilvusServer()
    server.start()
    milvus_process_id = server.process.pid
    milvus_server = server
    env = {
        "DJANGO_SETTINGS_MODULE": "kbplatform.settings.base",
        "KB_VAR_DIR": str(var_dir),
        "MILVUS_URI": server.uri,
        "MILVUS_COLLECTION": f"bench_{name}",
        "CELERY_TASK_DEFAULT_QUEUE": f"bench-{name}-{uuid.uuid4().hex[:8]}",
        "CELERY_TASK_ALWAYS_EAGER": "false",
        # As production runs (`settings.production`): DEBUG's cursor writes out every statement it sends, the turn's
        # batch of literals included.
        "DJANGO_DEBUG": os.environ.get("DJANGO_DEBUG", "false"),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        # Kept connections, as production settings keep them: a request does not open its own.
        env["DATABASE_CONN_MAX_AGE"] = os.environ.get("DATABASE_CONN_MAX_AGE", "60")
    os.environ.update(env)
    # From here on the server is stopped however the run ends: a set-up that fails (two runs migrating one database at
    # once) would otherwise leave it running.
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        yield dict(os.environ)
    finally:
        server.close()


def planner_statistics_refresh() -> None:
    """ANALYZE the database after a benchmark's bulk load, and say so on stderr: what PostgreSQL's autovacuum does
    within a minute of one, so a figure measures the query plans a deployment runs, not those of tables the planner
    has never seen (a turn's reads of chunks by id then scan the whole tenant's index). A server running with autovacuum
    off never analyzes by itself; the line says that too. Nothing to do on SQLite, which plans without statistics."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        (autovacuum,) = cursor.fetchone()
        started = time.perf_counter()
        cursor.execute("ANALYZE")
    took = time.perf_counter() - started
    never = " (this server runs with autovacuum off: it never would)" if autovacuum == "off" else ""
    print(f"planner statistics: ANALYZE after the load ({took:.1f}s), as autovacuum would{never}", file=sys.stderr)


@contextmanager
def worker(env: dict) -> Iterator[object]:
    from tests.services import CeleryWorker

    process = CeleryWorker(env=env, queue=env["CELERY_TASK_DEFAULT_QUEUE"])
    process.start(timeout=180)
    try:
        yield process
    finally:
        process.stop()


def build_of(ref: str) -> Path:
    """A checkout of git revision `ref` under var/bench/builds/, made once per commit, for benchmarks that measure an
    earlier build in the same run as this one (`--against REF`). It runs on this checkout's virtualenv."""
    import subprocess

    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = ROOT / "var" / "bench" / "builds" / sha[:12]
    if not (tree / "manage.py").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), sha], cwd=ROOT, check=True)
    # A build's benchmarks read the data beside their checkout (`../shared/data`), as this one's do.
    beside = tree.parent / DATA.parent.name
    if not beside.exists():
        beside.symlink_to(DATA.parent)
    return tree


def run_build(ref: str, script: str, args: list[str], *, exit_codes: tuple[int, ...] = (0,)) -> str:
    """Run bench/`script` of build `ref` (`build_of`) with `args` and return what it printed; its progress (stderr)
    goes to this terminal. Raises SystemExit when that build's benchmark fails (exits with a code not in
    `exit_codes`: a benchmark that exits 1 for a missed target still printed its figures)."""
    import subprocess

    tree = build_of(ref)
    print(f"[{ref}] running bench/{script} {' '.join(args)} in {tree}", file=sys.stderr, flush=True)
    environment = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE",)}
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / script), *args],
        cwd=tree,
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
    )
    if done.returncode not in exit_codes:
        raise SystemExit(f"bench/{script} of {ref} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return done.stdout


def modes_parse(spec: str) -> list[tuple[str, float | None]]:
    """(retrieval_mode, hybrid_dense_weight) of each comma-separated `semantic`, `full_text`, `hybrid` (rank fusion) or
    `hybrid:W` (weighted, W the vector side's share) of a benchmark's `--modes`. Pure."""
    modes = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        mode, _, weight = item.partition(":")
        if mode not in ("semantic", "full_text", "hybrid") or (weight and mode != "hybrid"):
            raise SystemExit(f"--modes: {item!r} is not semantic, full_text, hybrid or hybrid:W")
        modes.append((mode, float(weight) if weight else None))
    return modes


def mode_label(mode: str, weight: float | None) -> str:
    return f"{mode} w={weight:g}" if weight is not None else ("hybrid rrf" if mode == "hybrid" else mode)


def beir_corpus(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
            if limit is not None and len(rows) >= limit:
                break
    return rows


def wait_indexed(*, tenant, knowledge_base, expected: int, timeout: float = 7200, label: str = "") -> dict:  # noqa: ANN001
    """Poll until every document of the knowledge base is indexed or failed; prints progress on one line."""
    from retrieval.models import Document, DocumentStatus

    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        counts = dict.fromkeys(DocumentStatus.values, 0)
        for status in (
            Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).values_list("status", flat=True)
        ):
            counts[status] += 1
        finished = counts[DocumentStatus.INDEXED] + counts[DocumentStatus.FAILED]
        if finished != last:
            print(f"\r  {label} {finished}/{expected} documents finished", end="", file=sys.stderr, flush=True)
            last = finished
        if finished >= expected:
            print(file=sys.stderr)
            return counts
        time.sleep(0.5)
    raise TimeoutError(f"not all documents finished within {timeout}s")


def scifact_ingest(
    *,
    tenant,  # noqa: ANN001
    knowledge_base,  # noqa: ANN001
    limit: int | None = None,
    always: frozenset[str] = frozenset(),
) -> tuple[int, float, dict]:
    """Ingest the SciFact corpus through the worker (its first `limit` documents, and with a limit every document whose
    id is in `always` too); returns (documents, seconds, status counts)."""
    from retrieval.services import BulkDocument, documents_create_bulk

    rows = beir_corpus(SCIFACT / "corpus.jsonl")
    if limit is not None:
        rows = [row for index, row in enumerate(rows) if index < limit or str(row["_id"]) in always]
    started = time.perf_counter()
    documents_create_bulk(
        tenant=tenant,
        knowledge_base=knowledge_base,
        documents=[
            BulkDocument(title=row.get("title") or row["_id"], external_id=str(row["_id"]), text=_beir_text(row))
            for row in rows
        ],
    )
    counts = wait_indexed(tenant=tenant, knowledge_base=knowledge_base, expected=len(rows), label="platform")
    return len(rows), time.perf_counter() - started, counts


def _beir_text(row: dict) -> str:
    title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
    return f"{title}\n\n{text}" if title else text


def tenant_api_client(*, slug: str, name: str) -> tuple[object, object]:
    """(tenant, DRF client holding an API key of every scope of it): a benchmark's tenant, reached as a client does."""
    from rest_framework.test import APIClient

    from lifecycle.services import tenant_get_or_create
    from tenants.scopes import SCOPE_ORDER
    from tenants.services import api_key_create

    tenant, _ = tenant_get_or_create(slug=slug, name=name)
    _, raw_key = api_key_create(tenant=tenant, name="bench", scopes=SCOPE_ORDER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    return tenant, client


def knowledge_base_through_api(*, tenant, client, **fields: object):  # noqa: ANN001, ANN201
    """A knowledge base created by `POST /api/v1/knowledge-bases/` with `fields` (name, embedding_model,
    text_analyzer, ...), as its model row."""
    from retrieval.models import KnowledgeBase

    response = client.post("/api/v1/knowledge-bases/", fields, format="json")
    if response.status_code != 201:
        raise SystemExit(f"knowledge base refused ({response.status_code}): {response.content[:300]!r}")
    return KnowledgeBase.objects.for_tenant(tenant).get(pk=response.json()["id"])


def documents_through_api(*, tenant, client, knowledge_base, documents: list[dict], label: str = "") -> dict:  # noqa: ANN001
    """Add `documents` (each as `POST .../documents/bulk/` takes one: text or chunks, title, external_id) in bulk
    requests of KB_BULK_DOCUMENTS_MAX and wait until the worker has indexed them all; returns the status counts.
    Raises SystemExit when the API refuses one or the worker fails one: a benchmark's corpus is indexed whole."""
    from django.conf import settings

    url = f"/api/v1/knowledge-bases/{knowledge_base.pk}/documents/bulk/"
    size = settings.BULK_DOCUMENTS_MAX
    for start in range(0, len(documents), size):
        response = client.post(url, {"documents": documents[start : start + size]}, format="json")
        body = response.json() if response.status_code == 202 else {}
        if response.status_code != 202 or body["failed"]:
            raise SystemExit(f"documents refused ({response.status_code}): {response.content[:500]!r}")
    counts = wait_indexed(tenant=tenant, knowledge_base=knowledge_base, expected=len(documents), label=label)
    if counts["failed"]:
        raise SystemExit(f"{counts['failed']} of {len(documents)} documents failed to index in {knowledge_base.name}")
    return counts


def load_average() -> str:
    """The machine's load average (1 and 5 minutes), printed beside every timing: other work on the cores shows."""
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min) on {os.cpu_count()} CPUs"


def rss_mb() -> float:
    """This process's resident memory (VmRSS of /proc/self/status), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def answered_nothing_replies() -> set[str]:
    """The replies a turn gives when it found nothing that answers (`NOTHING_FOUND`, or `NOTHING_NEW` when the
    exclusion window left passages out), in every reply language: how a benchmark tells a turn answered nothing."""
    from conversations.turn import languages

    return {
        replies[kind]
        for replies in languages.REPLIES.values()
        for kind in (languages.NOTHING_FOUND, languages.NOTHING_NEW)
    }


def covering_documents(questions: Sequence[str]) -> dict[str, list[str]]:
    """A knowledge base that answers each of `questions`: one document (external id -> its one chunk's text) per
    distinct question, holding that question's text. A duplicate benchmark stores the answer of the question a pair
    asks first and times or judges the decision on the second; a turn whose knowledge base holds nothing that answers
    it says so and stores no answer to serve (`answering.answerable`), so over a knowledge base that does not cover the
    questions (a four-page help centre for LCQMC's general questions) the benchmark would measure that, not the
    decision."""
    distinct = dict.fromkeys(question for question in questions if question.strip())
    return {f"q{index}": [question] for index, question in enumerate(distinct)}


def conversation_start(client, knowledge_base_id: int) -> int:  # noqa: ANN001
    """A new conversation of the knowledge base (`POST /api/v1/conversations/`); its id. A refusal ends the run."""
    response = client.post("/api/v1/conversations/", {"knowledge_base": knowledge_base_id}, format="json")
    if response.status_code != 201:
        raise SystemExit(f"conversation refused ({response.status_code}): {response.content[:300]!r}")
    return response.json()["id"]


def turn_ask(client, conversation_id: int, question: str) -> dict:  # noqa: ANN001
    """The body of a turn asking `question` through `POST /api/v1/conversations/{id}/messages/`. A refusal ends the
    run."""
    response = client.post(f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}, format="json")
    if response.status_code != 200:
        raise SystemExit(f"turn refused ({response.status_code}): {response.content[:300]!r}")
    return response.json()
