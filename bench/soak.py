"""Soak: mixed traffic for a long while (default 30 minutes) against gunicorn, PostgreSQL, a Celery worker and a
`milvus-lite server`, watching the processes' resident memory and auditing at the end that nothing was lost.

What runs: bench/load.py's set-up (the MTRAG corpus indexed through the real pipeline, gunicorn with gthread
workers on 127.0.0.1) plus a real Celery worker (bench/common.py), so uploads go through the broker as in
production. Traffic, all over HTTP: customers replaying MTRAG conversations (bench/load.py's, one in ten turns asked
again) who rate a share of the answers (POST /api/v1/turns/{id}/feedback/, "up" or "down"), searchers
(POST /api/v1/knowledge-bases/{id}/search/) and an uploader adding a SciFact abstract every few seconds.

Printed every minute: the resident memory (VmRSS from /proc) of each gunicorn worker, of the Celery worker (its
parent and pool processes together) and of the Milvus server, with the traffic so far. At the end: errors (any
non-2xx answer or transport error), and lost items: acknowledged turns and consumed items missing from the database
(bench/load.py's audit), acknowledged feedback missing or with another rating, uploaded documents not indexed once
the worker has had `--drain-minutes` to finish. Exit status 1 unless there are 0 errors, 0 lost items, and each
process's RSS at the end is within 10% of its value at minute 5 (`--reference-minute`; the minute before the last
in a run shorter than that).

Usage (PostgreSQL required: the soak is of the production database):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kbsoak REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/soak.py [--minutes 30] [--customers 4] [--searchers 2] [--upload-every 10]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import common  # noqa: E402
from common import SCIFACT, beir_corpus, platform, worker  # noqa: E402
from load import AckedTurn, Customer, Results, audit, free_port, gunicorn_start, index_corpus, mtrag_scripts  # noqa: E402

RSS_TOLERANCE = 0.10
FEEDBACK_SHARE = 0.3


# --- traffic beside the turns -------------------------------------------------------------------------------------


@dataclass
class Traffic:
    """What the threads other than the turns did, and what they were acknowledged."""

    searches: int = 0
    feedback: dict[int, str] = field(default_factory=dict)  # turn id -> rating last acknowledged
    uploads: list[int] = field(default_factory=list)  # document ids acknowledged (202)
    deleted: list[int] = field(default_factory=list)  # uploads deleted again (204), oldest first
    lock: threading.Lock = field(default_factory=threading.Lock)


class RatingCustomer(Customer):
    """A load.py customer who rates a share of the answers, as an end user with thumbs up and down does."""

    def __init__(self, *, traffic: Traffic, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.traffic = traffic

    def turn_acknowledged(self, acked: AckedTurn) -> None:
        if self.random.random() >= FEEDBACK_SHARE:
            return
        rating = self.random.choice(["up", "down"])
        try:
            status, _ = self._request(f"/api/v1/turns/{acked.turn_id}/feedback/", {"rating": rating})
        except OSError as exc:
            self.results.error(f"feedback:{type(exc).__name__}")
            return
        if status not in (200, 201):
            self.results.error(f"feedback:{status}")
            return
        with self.traffic.lock:
            self.traffic.feedback[acked.turn_id] = rating


class Searcher(Customer):
    """Searches of the knowledge base with MTRAG questions, one after the other, with a pause between."""

    def __init__(self, *, traffic: Traffic, pause: float, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.traffic, self.pause = traffic, pause

    def run(self) -> None:
        questions = [question for script in self.scripts for question in script]
        while time.monotonic() < self.deadline:
            query = questions[self.random.randrange(len(questions))]
            try:
                status, _ = self._request(
                    f"/api/v1/knowledge-bases/{self.knowledge_base_id}/search/", {"query": query, "limit": 10}
                )
            except OSError as exc:
                self.results.error(f"search:{type(exc).__name__}")
                continue
            if status != 200:
                self.results.error(f"search:{status}")
            else:
                with self.traffic.lock:
                    self.traffic.searches += 1
            time.sleep(self.pause)


class Uploader(Customer):
    """One SciFact abstract uploaded every `every` seconds (JSON text), each acknowledged with 202 and queued. With
    `keep`, the corpus churns as a real tenant's does: once more than `keep` uploads are kept, each upload is followed
    by the deletion of the oldest one (DELETE /api/v1/documents/{id}/, 204), so the data stays the same size."""

    def __init__(
        self, *, traffic: Traffic, every: float, abstracts: list[dict], run_id: str, keep: int | None, **kwargs: object
    ) -> None:
        super().__init__(**kwargs)
        self.traffic, self.every, self.abstracts, self.run_id, self.keep = traffic, every, abstracts, run_id, keep

    def _delete_oldest(self) -> None:
        with self.traffic.lock:
            kept = [pk for pk in self.traffic.uploads if pk not in set(self.traffic.deleted)]
        if self.keep is None or len(kept) <= self.keep:
            return
        try:
            status, _ = self._request(f"/api/v1/documents/{kept[0]}/", None, method="DELETE")
        except OSError as exc:
            self.results.error(f"delete:{type(exc).__name__}")
            return
        if status != 204:
            self.results.error(f"delete:{status}")
            return
        with self.traffic.lock:
            self.traffic.deleted.append(kept[0])

    def run(self) -> None:
        sent = 0
        while self.every and time.monotonic() < self.deadline:
            row = self.abstracts[sent % len(self.abstracts)]
            body = {
                "title": (row.get("title") or row["_id"])[:200],
                "external_id": f"soak-{self.run_id}-{sent}",
                "text": f"{row.get('title', '')}\n\n{row['text']}",
            }
            sent += 1
            try:
                status, answer = self._request(f"/api/v1/knowledge-bases/{self.knowledge_base_id}/documents/", body)
            except OSError as exc:
                self.results.error(f"upload:{type(exc).__name__}")
                continue
            if status != 202:
                self.results.error(f"upload:{status}")
            else:
                with self.traffic.lock:
                    self.traffic.uploads.append(answer["id"])
                self._delete_oldest()
            time.sleep(self.every)


# --- resident memory from /proc ----------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []
    return sorted(found)


def rss_mb(pid: int) -> float:
    """VmRSS of one process in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return 0.0


def tree_rss_mb(pid: int) -> float:
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        total += rss_mb(current)
        pending += children(current)
    return total


@dataclass
class Watched:
    """The processes whose memory is watched, by label: each gunicorn worker alone (a leak in one shows), the
    Celery worker and the Milvus server with their children."""

    gunicorn_master: int
    celery: int
    milvus: int
    web_workers: list[int] = field(default_factory=list)

    def sample(self) -> dict[str, float]:
        current = children(self.gunicorn_master)
        if not self.web_workers:
            self.web_workers = current
        row = {f"web{i + 1}": rss_mb(pid) if pid in current else 0.0 for i, pid in enumerate(self.web_workers)}
        row["celery"] = tree_rss_mb(self.celery)
        row["milvus"] = tree_rss_mb(self.milvus)
        return row


def rss_verdicts(samples: dict[int, dict[str, float]], *, reference_minute: int) -> dict[str, tuple[float, bool]]:
    """Per process: the change from `reference_minute` to the last sample, and whether it is within the tolerance.
    A process gone (0 MB: restarted, killed) fails."""
    last = samples[max(samples)]
    reference = samples[reference_minute]
    verdicts = {}
    for label, value in last.items():
        base = reference.get(label, 0.0)
        change = (value - base) / base if base else float("inf")
        verdicts[label] = (change, bool(base and value and abs(change) <= RSS_TOLERANCE))
    return verdicts


# --- the run -----------------------------------------------------------------------------------------------------


def uploads_audit(
    *,
    tenant,  # noqa: ANN001
    document_ids: list[int],
    deleted_ids: list[int],
    drain_seconds: float,
) -> dict[str, int]:
    """Wait up to `drain_seconds` for the worker to index every acknowledged upload not deleted since; then count
    those that are not, and the deleted ones (204) still there."""
    from retrieval.models import Document, DocumentStatus

    deleted = set(deleted_ids)
    remaining = Document.objects.for_tenant(tenant).filter(pk__in=list(deleted)).count()
    document_ids = [pk for pk in document_ids if pk not in deleted]
    deadline = time.monotonic() + drain_seconds
    while True:
        statuses = dict(Document.objects.for_tenant(tenant).filter(pk__in=document_ids).values_list("pk", "status"))
        waiting = [pk for pk in document_ids if statuses.get(pk) not in (DocumentStatus.INDEXED, DocumentStatus.FAILED)]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(2)
    return {
        "uploads_deleted": len(deleted),
        "deleted_still_present": remaining,
        "uploads_kept": len(document_ids),
        "uploads_missing": sum(1 for pk in document_ids if pk not in statuses),
        "uploads_failed": sum(1 for pk in document_ids if statuses.get(pk) == DocumentStatus.FAILED),
        "uploads_not_indexed": sum(1 for pk in document_ids if statuses.get(pk) != DocumentStatus.INDEXED),
    }


def feedback_audit(*, tenant, feedback: dict[int, str]) -> dict[str, int]:  # noqa: ANN001
    from conversations.models import Feedback

    stored = dict(
        Feedback.objects.for_tenant(tenant).filter(turn_id__in=list(feedback)).values_list("turn_id", "rating")
    )
    return {
        "feedback_acknowledged": len(feedback),
        "feedback_lost": sum(1 for turn_id in feedback if turn_id not in stored),
        "feedback_wrong": sum(1 for turn_id, rating in feedback.items() if stored.get(turn_id, rating) != rating),
    }


def milvus_rows() -> dict[str, int]:
    """Rows Milvus holds in this deployment's chunk collections and question collections (deleted rows not yet
    compacted away may be counted)."""
    from retrieval import vectorstore

    chunk_names = set(vectorstore.chunk_collection_names())
    rows = {"chunk rows": 0, "question rows": 0}
    for name in vectorstore.deployment_collection_names():
        kind = "chunk rows" if name in chunk_names else "question rows"
        rows[kind] += vectorstore.collection_entity_count(name=name)
    return rows


def milvus_restart_rss(*, tenant, knowledge_base, questions: list[str]) -> float:  # noqa: ANN001
    """The Milvus server's RSS once restarted on the same data with the deployment's collections loaded and searched
    as the run searched them (`questions` in the knowledge base's mode, so what searches build lazily, such as the
    full-text indexes of segments, is there too): what the data takes in a fresh process. Compared with the RSS the
    run ended with, it tells growth of the data from memory the process kept beside it."""
    from django.conf import settings

    from retrieval import embeddings, milvus, vectorstore
    from retrieval.selectors import chunk_search

    server = common.milvus_server
    server.stop()
    server.start()
    milvus.reset()
    for name in vectorstore.deployment_collection_names():
        milvus.connect().load_collection(name, timeout=settings.MILVUS_SETUP_TIMEOUT)
    for question in questions:
        chunk_search(
            tenant=tenant,
            knowledge_base=knowledge_base,
            query_vector=embeddings.embed_query(question),
            query_model_identity=embeddings.model_identity(),
            limit=10,
            query_text=question,
        )
    time.sleep(5)
    return tree_rss_mb(server.process.pid)


def milvus_memory_line(
    *,
    samples: dict[int, dict[str, float]],
    rows: dict[int | str, dict[str, int]],
    reference_minute: int,
    end_mb: float,
    restarted_mb: float,
) -> str:
    """What Milvus's memory measured: its change against the rows it stores (per row added, when rows were added),
    and the restarted server's RSS on the same data beside the RSS at the end."""
    last = max(samples)
    change = samples[last]["milvus"] - samples[reference_minute]["milvus"]
    before, after = rows[reference_minute], rows[last]
    added = sum(after.values()) - sum(before.values())
    stored = "  ".join(f"{kind} {before[kind]} -> {after[kind]}" for kind in before)
    per_row = f" = {change * 1024 / added:.1f} KB per row added" if added > 0 else ""
    return (
        f"Milvus     {change:+.1f} MB from minute {reference_minute} to {last} with {added:+d} rows stored ({stored})"
        f"{per_row}; {sum(rows['end'].values())} rows after the drain: {end_mb:.1f} MB, the server restarted on the "
        f"same data, loaded and searched: {restarted_mb:.1f} MB ({restarted_mb - end_mb:+.1f} MB: what the process "
        "held beside its data)"
    )


def table_print(samples: dict[int, dict[str, float]], minute: int, progress: str) -> None:
    labels = list(samples[minute])
    if minute == min(samples):
        print("minute  " + "  ".join(f"{label:>8}" for label in labels) + "   (RSS MB)  traffic so far", flush=True)
    print(
        f"{minute:>6}  " + "  ".join(f"{samples[minute][label]:8.1f}" for label in labels) + f"   {progress}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--customers", type=int, default=4, help="conversation threads (they also rate answers)")
    parser.add_argument("--searchers", type=int, default=2)
    parser.add_argument("--search-pause", type=float, default=1.0, help="seconds between one searcher's searches")
    parser.add_argument("--upload-every", type=float, default=10.0, help="seconds between uploads (0: none)")
    parser.add_argument(
        "--keep-uploads",
        type=int,
        default=-1,
        help="uploads kept: beyond it each upload deletes the oldest (a corpus that churns); -1 (default) keeps all",
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    parser.add_argument("--reference-minute", type=int, default=5, help="the RSS the end is compared with")
    parser.add_argument("--drain-minutes", type=float, default=10.0, help="time the worker gets to index uploads")
    parser.add_argument(
        "--corpus-limit", type=int, default=None, help="index only the first N MTRAG passages (a quicker set-up)"
    )
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    if args.minutes < 2:
        parser.error("--minutes must be at least 2 (the end is compared with an earlier minute)")
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        parser.error("set DATABASE_URL to a PostgreSQL database: the soak is of the production database")
    reference_minute = min(args.reference_minute, args.minutes - 1)
    run_id = uuid.uuid4().hex[:8]
    with platform(name=f"soak_{run_id}") as env:
        from lifecycle.services import tenant_get_or_create
        from tenants.scopes import SCOPE_ORDER, Scope
        from tenants.services import api_key_create

        tenant = tenant_get_or_create(slug=f"soak-{run_id}", name="Soak")[0]
        knowledge_base = index_corpus(tenant=tenant, limit=args.corpus_limit)
        keys = [api_key_create(tenant=tenant, name=f"soak {i}", scopes=[Scope.CHAT])[1] for i in range(4)]
        admin_key = api_key_create(tenant=tenant, name="soak uploads", scopes=SCOPE_ORDER)[1]
        scripts = mtrag_scripts()
        abstracts = beir_corpus(SCIFACT / "corpus.jsonl", 2000)
        random.Random(args.seed).shuffle(abstracts)
        server_env = {
            **env,
            "DJANGO_DEBUG": "false",
            "CELERY_TASK_ALWAYS_EAGER": "false",  # uploads go through the broker to the worker, as in production
            "KB_RATE_LIMIT": "1000000/min",
            "KB_CACHE_PREFIX": f"bench-soak-{run_id}",
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "LOG_LEVEL": "WARNING",
        }
        port = free_port()
        with worker(server_env) as celery:
            gunicorn = gunicorn_start(env=server_env, port=port, workers=args.workers, threads=args.threads)
            try:
                watched = Watched(
                    gunicorn_master=gunicorn.pid, celery=celery.process.pid, milvus=common.milvus_process_id
                )
                results, traffic = Results(), Traffic()
                deadline = time.monotonic() + args.minutes * 60
                shared = {"port": port, "knowledge_base_id": knowledge_base.pk, "scripts": scripts, "results": results}
                threads = [
                    RatingCustomer(
                        traffic=traffic, raw_key=keys[i % len(keys)], seed=args.seed + i, deadline=deadline, **shared
                    )
                    for i in range(args.customers)
                ]
                threads += [
                    Searcher(
                        traffic=traffic,
                        pause=args.search_pause,
                        raw_key=keys[i % len(keys)],
                        seed=args.seed + 100 + i,
                        deadline=deadline,
                        **shared,
                    )
                    for i in range(args.searchers)
                ]
                threads.append(
                    Uploader(
                        traffic=traffic,
                        every=args.upload_every,
                        abstracts=abstracts,
                        run_id=run_id,
                        keep=args.keep_uploads if args.keep_uploads >= 0 else None,
                        raw_key=admin_key,
                        seed=args.seed + 200,
                        deadline=deadline,
                        **shared,
                    )
                )
                print(
                    f"soak: {args.minutes} min; {args.customers} customers (rating {FEEDBACK_SHARE:.0%} of answers), "
                    f"{args.searchers} searchers, an upload every {args.upload_every:g} s; gunicorn {args.workers} "
                    f"workers x {args.threads} threads, one Celery worker, milvus-lite server; load average "
                    f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs at the start",
                    flush=True,
                )
                started = time.monotonic()
                for thread in threads:
                    thread.start()
                samples: dict[int, dict[str, float]] = {}
                rows: dict[int, dict[str, int]] = {}
                for minute in range(args.minutes + 1):
                    time.sleep(max(0.0, started + minute * 60 - time.monotonic()))
                    samples[minute] = watched.sample()
                    rows[minute] = milvus_rows()
                    with results.lock, traffic.lock:
                        progress = (
                            f"turns={len(results.acked)} searches={traffic.searches} feedback={len(traffic.feedback)} "
                            f"uploads={len(traffic.uploads)} deleted={len(traffic.deleted)} "
                            f"errors={sum(results.errors.values())} "
                            + " ".join(f"{k.replace(' ', '_')}={v}" for k, v in rows[minute].items())
                        )
                    table_print(samples, minute, progress)
                for thread in threads:
                    thread.join(timeout=180)
                uploads = uploads_audit(
                    tenant=tenant,
                    document_ids=list(traffic.uploads),
                    deleted_ids=list(traffic.deleted),
                    drain_seconds=args.drain_minutes * 60,
                )
                rows["end"] = milvus_rows()
                milvus_end_mb = tree_rss_mb(common.milvus_process_id)
            finally:
                os.killpg(gunicorn.pid, signal.SIGTERM)
                gunicorn.wait(timeout=30)

        checks = {**audit(tenant=tenant, results=results), **feedback_audit(tenant=tenant, feedback=traffic.feedback)}
        checks.update(uploads)
        try:
            milvus_restarted_mb = milvus_restart_rss(
                tenant=tenant,
                knowledge_base=knowledge_base,
                questions=[question for script in scripts[:10] for question in script[:3]],
            )
        except Exception as exc:  # noqa: BLE001 - a figure missing, not a failed soak: the audit is already made
            print(f"the restart of Milvus on the same data failed: {type(exc).__name__}: {exc}", flush=True)
            milvus_restarted_mb = float("nan")
    errors = sum(results.errors.values())
    lost = sum(
        checks[key]
        for key in (
            "lost_turns",
            "wrong_turns",
            "conversations_with_wrong_count",
            "lost_consumed_items",
            "wrong_consumed_items",
            "feedback_lost",
            "feedback_wrong",
            "uploads_not_indexed",
            "deleted_still_present",
        )
    )
    print(f"errors     {errors} {dict(results.errors) if results.errors else ''}")
    print("audit      " + "  ".join(f"{key}={value}" for key, value in checks.items()))
    print(f"lost       {lost}")
    verdicts = rss_verdicts(samples, reference_minute=reference_minute)
    note = (
        ""
        if reference_minute == args.reference_minute
        else f" (the run is too short for minute {args.reference_minute})"
    )
    print(
        f"RSS        end (minute {max(samples)}) against minute {reference_minute}{note}: "
        + "  ".join(f"{label} {change:+.1%} {'ok' if ok else 'OUT'}" for label, (change, ok) in verdicts.items())
    )
    print(
        milvus_memory_line(
            samples=samples,
            rows=rows,
            reference_minute=reference_minute,
            end_mb=milvus_end_mb,
            restarted_mb=milvus_restarted_mb,
        )
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    held = not errors and not lost and all(ok for _, ok in verdicts.values())
    print(
        f"target     0 errors, 0 lost, each RSS within {RSS_TOLERANCE:.0%} of minute {reference_minute}: "
        + ("MET" if held else "MISSED")
    )
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
