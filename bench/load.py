"""Load: simulated customers holding multi-turn conversations against the app under gunicorn, then an audit
that every acknowledged turn is in the database with its consumed items.

What runs: a private `milvus-lite server`, the MTRAG corpus indexed through the real pipeline (in this process),
gunicorn serving kbplatform on 127.0.0.1 (real HTTP, gthread workers), and N customer threads. Each customer
replays MTRAG conversations turn by turn through POST /api/v1/conversations/ and /messages/ (one in ten turns
re-asks an earlier question of the same conversation, so the stored-answer path is loaded too), until the time
is up. Customers wait for each answer before asking the next question, as a chat UI does.

Printed: throughput (turns/s), latency p50/p95/p99 of a turn, error count (any non-2xx or transport error), and
the same figures for a baseline of one customer measured first on the same server, with the ratios. Then the
audit: acknowledged turns missing from the database, turns whose number or question differ, conversations whose
turn count disagrees with what was acknowledged, and consumed items missing or stamped with the wrong turn.
Target: zero errors, zero lost turns, zero lost consumed items. Exit status 1 when the target is missed.

With `--against REF` the same benchmark of build REF (a git revision) runs first on the same machine and data, and
a last line gives this build's throughput and latency under load as ratios of that build's.

Usage (PostgreSQL recommended; SQLite under var/bench/ otherwise):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kbbench .venv/bin/python bench/load.py \
        [--customers 32] [--seconds 60] [--baseline-seconds 15] [--workers 2] [--threads 16] [--against REF]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from common import DATA, ROOT, platform, run_build  # noqa: E402

MTRAG = DATA / "mtrag"


# --- the customers ---------------------------------------------------------------------------------------------


@dataclass
class AckedTurn:
    conversation_id: int
    turn_id: int
    question: str
    document_ids: list[int]
    order: int  # position among this conversation's acknowledged turns (1-based)


@dataclass
class Results:
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    acked: list[AckedTurn] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)
    conversations: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1


class Customer(threading.Thread):
    def __init__(
        self,
        *,
        port: int,
        raw_key: str,
        knowledge_base_id: int,
        scripts: list[list[str]],
        seed: int,
        deadline: float,
        results: Results,
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.raw_key, self.knowledge_base_id = port, raw_key, knowledge_base_id
        self.scripts, self.random, self.deadline, self.results = scripts, random.Random(seed), deadline, results
        self.connection: http.client.HTTPConnection | None = None

    def _request(self, path: str, body: dict | None, method: str = "POST") -> tuple[int, dict | None]:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Api-Key {self.raw_key}", "Content-Type": "application/json"}
        for attempt in (1, 2):
            try:
                if self.connection is None:
                    self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                self.connection.request(method, path, body=payload, headers=headers)
                response = self.connection.getresponse()
                data = response.read()
                return response.status, (json.loads(data) if data else None)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A keep-alive connection the server closed between requests: reconnect once, never resend a
                # request the server may have processed (RemoteDisconnected comes before any response byte).
                self.connection = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            script = self.scripts[self.random.randrange(len(self.scripts))]
            try:
                status, body = self._request("/api/v1/conversations/", {"knowledge_base": self.knowledge_base_id})
            except OSError as exc:
                self.results.error(f"create:{type(exc).__name__}")
                continue
            if status != 201:
                self.results.error(f"create:{status}")
                continue
            conversation_id = body["id"]
            with self.results.lock:
                self.results.conversations += 1
            asked: list[str] = []
            order = 0
            for question in script:
                if time.monotonic() >= self.deadline:
                    break
                if asked and self.random.random() < 0.1:
                    question = self.random.choice(asked)  # the user asks again: the stored-answer path
                started = time.perf_counter()
                try:
                    status, body = self._request(
                        f"/api/v1/conversations/{conversation_id}/messages/", {"question": question}
                    )
                except OSError as exc:
                    self.results.error(f"turn:{type(exc).__name__}")
                    break
                elapsed = (time.perf_counter() - started) * 1000
                if status != 200:
                    self.results.error(f"turn:{status}")
                    break  # the conversation's state is unknown to the client: start another one
                order += 1
                asked.append(question)
                acked = AckedTurn(
                    conversation_id=conversation_id,
                    turn_id=body["turn_id"],
                    question=question.strip(),
                    document_ids=sorted({source["document_id"] for source in body["sources"]}),
                    order=order,
                )
                with self.results.lock:
                    self.results.latencies_ms.append(elapsed)
                    self.results.acked.append(acked)
                    action = body["dedup"]["action"]
                    self.results.actions[action] = self.results.actions.get(action, 0) + 1
                self.turn_acknowledged(acked)

    def turn_acknowledged(self, acked: AckedTurn) -> None:
        """Called after each acknowledged turn, on this customer's thread: what a customer that does more than ask
        (bench/soak.py's, which also rates answers) does next."""


def run_customers(
    *,
    count: int,
    seconds: float,
    port: int,
    raw_keys: list[str],
    knowledge_base_id: int,
    scripts: list[list[str]],
    seed: int,
) -> tuple[Results, float]:
    results = Results()
    started = time.monotonic()
    deadline = started + seconds
    customers = [
        Customer(
            port=port,
            raw_key=raw_keys[i % len(raw_keys)],
            knowledge_base_id=knowledge_base_id,
            scripts=scripts,
            seed=seed + i,
            deadline=deadline,
            results=results,
        )
        for i in range(count)
    ]
    for customer in customers:
        customer.start()
    for customer in customers:
        customer.join()
    return results, time.monotonic() - started


# --- figures ---------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def figures(results: Results, elapsed: float) -> dict:
    lat = results.latencies_ms
    return {
        "turns": len(results.acked),
        "conversations": results.conversations,
        "throughput": len(results.acked) / elapsed if elapsed else 0.0,
        "p50": statistics.median(lat) if lat else float("nan"),
        "p95": percentile(lat, 0.95),
        "p99": percentile(lat, 0.99),
        "errors": sum(results.errors.values()),
        "error_kinds": dict(results.errors),
        "actions": dict(results.actions),
        "seconds": elapsed,
    }


def show(label: str, f: dict) -> None:
    print(
        f"{label:<10} customers-turns={f['turns']:>6}  conversations={f['conversations']:>5}  "
        f"throughput={f['throughput']:7.2f} turns/s  p50={f['p50']:7.1f} ms  p95={f['p95']:7.1f} ms  "
        f"p99={f['p99']:7.1f} ms  errors={f['errors']}  ({f['seconds']:.1f} s)"
    )
    if f["error_kinds"]:
        print(f"{'':<10} error kinds: {f['error_kinds']}")
    print(f"{'':<10} decisions: {f['actions']}")


# --- the audit ------------------------------------------------------------------------------------------------


def audit(*, tenant, results: Results) -> dict:  # noqa: ANN001
    """Compare what the customers were told with what the database holds."""
    from conversations.models import ConsumedItem, Conversation, Turn

    by_conversation: dict[int, list[AckedTurn]] = {}
    for acked in results.acked:
        by_conversation.setdefault(acked.conversation_id, []).append(acked)
    turn_rows = {
        pk: (conversation_id, number, question)
        for pk, conversation_id, number, question in Turn.objects.for_tenant(tenant)
        .filter(pk__in=[a.turn_id for a in results.acked])
        .values_list("pk", "conversation_id", "number", "question")
    }
    counts = dict(
        Conversation.objects.for_tenant(tenant).filter(pk__in=list(by_conversation)).values_list("pk", "turn_count")
    )
    consumed_rows: dict[int, dict[int, int]] = {}
    for conversation_id, item_id, turn_number in (
        ConsumedItem.objects.for_tenant(tenant)
        .filter(conversation_id__in=list(by_conversation), kind="doc")
        .values_list("conversation_id", "item_id", "turn_number")
    ):
        consumed_rows.setdefault(conversation_id, {})[item_id] = turn_number

    lost_turns = wrong_turns = count_mismatch = lost_consumed = wrong_consumed = 0
    for conversation_id, acked_turns in by_conversation.items():
        last_shown: dict[int, int] = {}
        for acked in sorted(acked_turns, key=lambda a: a.order):
            row = turn_rows.get(acked.turn_id)
            if row is None:
                lost_turns += 1
                continue
            if row != (conversation_id, acked.order, acked.question):
                wrong_turns += 1
            last_shown.update(dict.fromkeys(acked.document_ids, acked.order))
        if counts.get(conversation_id) != len(acked_turns):
            count_mismatch += 1
        stored = consumed_rows.get(conversation_id, {})
        for document_id, turn_number in last_shown.items():
            if document_id not in stored:
                lost_consumed += 1
            elif stored[document_id] != turn_number:
                wrong_consumed += 1
    return {
        "acknowledged_turns": len(results.acked),
        "lost_turns": lost_turns,
        "wrong_turns": wrong_turns,
        "conversations_with_wrong_count": count_mismatch,
        "consumed_items_checked": sum(len({d for a in t for d in a.document_ids}) for t in by_conversation.values()),
        "lost_consumed_items": lost_consumed,
        "wrong_consumed_items": wrong_consumed,
    }


# --- setup -------------------------------------------------------------------------------------------------------


def mtrag_scripts() -> list[list[str]]:
    scripts = []
    with (MTRAG / "conversations.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                turns = [t["question"].strip() for t in json.loads(line)["turns"] if t["question"].strip()]
                if turns:
                    scripts.append(turns)
    return scripts


def index_corpus(*, tenant, limit: int | None = None):  # noqa: ANN001, ANN201
    """The MTRAG corpus (one document per passage; its first `limit` passages, when given) through the real
    pipeline, run eagerly in this process."""
    from kbplatform.celery import app
    from retrieval.models import Document, DocumentStatus
    from retrieval.services import BulkDocument, documents_create_bulk, knowledge_base_create

    app.conf.task_always_eager = True
    knowledge_base = knowledge_base_create(tenant=tenant, name="mtrag")
    rows = [json.loads(line) for line in (MTRAG / "corpus.jsonl").open(encoding="utf-8") if line.strip()][:limit]
    started = time.perf_counter()
    documents_create_bulk(
        tenant=tenant,
        knowledge_base=knowledge_base,
        documents=[BulkDocument(title=r["title"], external_id=r["passage_id"], text=r["text"]) for r in rows],
    )
    statuses = list(
        Document.objects.for_tenant(tenant).filter(knowledge_base=knowledge_base).values_list("status", flat=True)
    )
    indexed = statuses.count(DocumentStatus.INDEXED)
    print(f"indexed {indexed}/{len(rows)} MTRAG passages in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if indexed != len(rows):
        raise SystemExit("indexing the corpus failed; see the log")
    return knowledge_base


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gunicorn_start(*, env: dict, port: int, workers: int, threads: int) -> subprocess.Popen:
    log = open(ROOT / "var" / "bench" / "gunicorn.log", "ab")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "kbplatform.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--worker-class",
            "gthread",
            "--timeout",
            "120",
            "--keep-alive",
            "75",
        ],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn exited; see {ROOT / 'var' / 'bench' / 'gunicorn.log'}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/api/health/")
            if connection.getresponse().status in (200, 503):
                return process
        except OSError:
            time.sleep(0.3)
    raise SystemExit("gunicorn did not answer within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--baseline-seconds", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--against", metavar="REF", help="also run this benchmark of git revision REF, first")
    args = parser.parse_args()
    if args.customers < 1 or args.seconds <= 0:
        parser.error("--customers and --seconds must be positive")
    earlier = None
    if args.against:
        own = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in LOAD_OPTIONS]
        # That build exits 1 when it misses its own target (an error under load): its figures still stand.
        earlier = load_line_parse(run_build(args.against, "load.py", own, exit_codes=(0, 1)))

    run_id = uuid.uuid4().hex[:8]
    with platform(name=f"load_{run_id}") as env:
        from django.db import connection

        from lifecycle.services import tenant_get_or_create
        from tenants.models import ApiKeyRole
        from tenants.services import api_key_create

        tenant = tenant_get_or_create(slug=f"load-{run_id}", name="Load test")[0]
        knowledge_base = index_corpus(tenant=tenant)
        raw_keys = [api_key_create(tenant=tenant, name=f"load {i}", role=ApiKeyRole.STANDARD)[1] for i in range(4)]
        scripts = mtrag_scripts()

        server_env = {
            **env,
            "DJANGO_DEBUG": "false",
            "CELERY_TASK_ALWAYS_EAGER": "true",
            # The limiter runs (in Redis) but is set above what this load asks for: errors here mean failures.
            "KB_RATE_LIMIT": "1000000/min",
            "KB_CACHE_PREFIX": f"bench-load-{run_id}",
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "LOG_LEVEL": "WARNING",
        }
        port = free_port()
        server = gunicorn_start(env=server_env, port=port, workers=args.workers, threads=args.threads)
        try:
            # Warm-up (not measured): every worker loads the embedding model on its first turn.
            run_customers(
                count=args.workers * 2,
                seconds=5,
                port=port,
                raw_keys=raw_keys,
                knowledge_base_id=knowledge_base.pk,
                scripts=scripts,
                seed=args.seed - 100,
            )
            baseline, baseline_elapsed = run_customers(
                count=1,
                seconds=args.baseline_seconds,
                port=port,
                raw_keys=raw_keys,
                knowledge_base_id=knowledge_base.pk,
                scripts=scripts,
                seed=args.seed - 1,
            )
            load, load_elapsed = run_customers(
                count=args.customers,
                seconds=args.seconds,
                port=port,
                raw_keys=raw_keys,
                knowledge_base_id=knowledge_base.pk,
                scripts=scripts,
                seed=args.seed,
            )
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)

        base, under = figures(baseline, baseline_elapsed), figures(load, load_elapsed)
        print(
            f"gunicorn: {args.workers} workers x {args.threads} threads on 127.0.0.1; "
            f"{len(scripts)} MTRAG conversations replayed; database: {connection.vendor}"
        )
        show("baseline", base)
        show(f"load x{args.customers}", under)
        print(
            f"ratios     throughput {under['throughput'] / base['throughput']:.2f}x baseline, "
            f"p50 {under['p50'] / base['p50']:.2f}x, p95 {under['p95'] / base['p95']:.2f}x, "
            f"p99 {under['p99'] / base['p99']:.2f}x"
        )
        if earlier is not None:
            print(
                f"against {args.against}: throughput {under['throughput'] / earlier['throughput']:.2f}x "
                f"({under['throughput']:.2f} against {earlier['throughput']:.2f} turns/s), "
                f"p50 {under['p50'] / earlier['p50']:.2f}x, p95 {under['p95'] / earlier['p95']:.2f}x "
                "(that build ran first, same data and machine)"
            )
        merged = Results(acked=baseline.acked + load.acked)
        checks = audit(tenant=tenant, results=merged)
        print("audit      " + "  ".join(f"{k}={v}" for k, v in checks.items()))
        missed = (
            under["errors"]
            + base["errors"]
            + checks["lost_turns"]
            + checks["wrong_turns"]
            + checks["conversations_with_wrong_count"]
            + checks["lost_consumed_items"]
            + checks["wrong_consumed_items"]
        )
        print(
            "target     zero errors, zero lost turns, zero lost consumed items: " + ("MET" if not missed else "MISSED")
        )
        return 1 if missed else 0


LOAD_OPTIONS = ("customers", "seconds", "baseline_seconds", "workers", "threads", "seed")


def load_line_parse(printed: str) -> dict[str, float]:
    """Throughput and latency under load from what this benchmark (any build of it) printed."""
    for line in printed.splitlines():
        if line.startswith("load x"):
            found = dict(re.findall(r"(throughput|p50|p95|p99)=\s*([\d.]+)", line))
            return {key: float(value) for key, value in found.items()}
    raise SystemExit(f"no 'load x' line in the earlier build's output:\n{printed[-2000:]}")


if __name__ == "__main__":
    raise SystemExit(main())
