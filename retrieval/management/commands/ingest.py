"""`manage.py ingest PATH --tenant SLUG --kb NAME`: a folder of files, or a BEIR `.jsonl` (`_id`, `title`,
`text`), into a knowledge base through the same services and worker as the API, with a progress bar.

Re-running it is safe: documents whose external id (the file's relative path, or the BEIR `_id`) is already in
the knowledge base are skipped."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kbplatform.errors import ApplicationError
from retrieval.models import Document, DocumentStatus, KnowledgeBase, TextAnalyzer
from retrieval.services import BulkDocument, documents_create_bulk, knowledge_base_create
from tenants.selectors import tenant_get_by_slug

if TYPE_CHECKING:
    from tenants.models import Tenant

FILE_GROUP = 64  # files read into memory at once
JSONL_GROUP = 1000


class Command(BaseCommand):
    help = "Ingest a folder of documents or a BEIR .jsonl file into a knowledge base."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--kb", required=True, help="knowledge base name (created if missing)")
        parser.add_argument(
            "--embedding-model",
            default="",
            help="embedding model of a knowledge base created here (an offered one; default: the deployment's)",
        )
        parser.add_argument(
            "--text-analyzer", choices=TextAnalyzer.values, default=None, help="the analyser of one created here"
        )
        parser.add_argument("--no-wait", action="store_true", help="queue the documents and return")
        parser.add_argument("--timeout", type=float, default=24 * 3600, help="seconds to wait for indexing")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        if not path.exists():
            raise CommandError(f"{path} does not exist.")
        tenant = tenant_get_by_slug(slug=options["tenant"])
        if tenant is None:
            raise CommandError(f"No tenant with slug {options['tenant']!r} (create it with create_tenant).")
        knowledge_base = KnowledgeBase.objects.for_tenant(tenant).filter(name=options["kb"]).first()
        if knowledge_base is None:
            try:
                knowledge_base = knowledge_base_create(
                    tenant=tenant,
                    name=options["kb"],
                    embedding_model=options["embedding_model"] or None,
                    text_analyzer=options["text_analyzer"],
                )
            except ApplicationError as exc:
                raise CommandError(f"Cannot create knowledge base {options['kb'][:80]!r}: {exc.message}") from exc
            except ValidationError as exc:
                reasons = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())
                raise CommandError(f"Cannot create knowledge base {options['kb'][:80]!r}: {reasons}") from exc
            self.stdout.write(
                f"Created knowledge base {knowledge_base.name!r} (id {knowledge_base.pk}, embedding model "
                f"{knowledge_base.embedding_model}, {knowledge_base.embedding_dimension} dimensions)."
            )

        beir = path.is_file() and path.suffix.lower() == ".jsonl"
        groups = self._jsonl_groups(path) if beir else self._file_groups(path)
        created_ids: list[int] = []
        seen = 0
        external_ids: set[str] = set()
        repeated = 0  # documents whose external id an earlier one of this input has: the service keeps the first
        for group in groups:
            seen += len(group)
            for item in group:
                repeated += item.external_id in external_ids
                external_ids.add(item.external_id)
            try:
                created = documents_create_bulk(tenant=tenant, knowledge_base=knowledge_base, documents=group)
            except ApplicationError as exc:
                raise CommandError(f"{exc.message} (queued before this: {len(created_ids)} document(s))") from exc
            created_ids += [document.pk for document in created]
        skipped = seen - repeated - len(created_ids)
        notes = [f"skipped {skipped} already there"] if skipped else []
        if repeated:
            notes.append(f"left out {repeated} whose external id an earlier one in the input has (the first is kept)")
        self.stdout.write(
            f"Queued {len(created_ids)} document(s) into {knowledge_base.name!r}"
            + (f"; {'; '.join(notes)}." if notes else ".")
        )
        if options["no_wait"] or not created_ids:
            return
        self._wait(tenant, created_ids, options["timeout"])

    def _jsonl_groups(self, path: Path) -> Iterator[list[BulkDocument]]:
        group: list[BulkDocument] = []
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise CommandError(f"{path}:{number}: not UTF-8 ({exc}). Save the file as UTF-8.") from exc
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    external_id = row["_id"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise CommandError(f"{path}:{number}: not a BEIR row with an _id ({exc}).") from exc
                if isinstance(external_id, bool) or not isinstance(external_id, str | int):
                    raise CommandError(f"{path}:{number}: not a BEIR row with an _id (_id is {external_id!r}).")
                external_id = str(external_id)
                for name in ("title", "text"):
                    if not isinstance(row.get(name) or "", str):
                        raise CommandError(f'{path}:{number}: "{name}" is not a string ({row[name]!r:.80}).')
                title = (row.get("title") or "").strip()
                text = (row.get("text") or "").strip()
                group.append(
                    BulkDocument(
                        title=title or external_id,
                        external_id=external_id,
                        text=f"{title}\n\n{text}" if title else text,
                    )
                )
                if len(group) >= JSONL_GROUP:
                    yield group
                    group = []
        if group:
            yield group

    def _file_groups(self, path: Path) -> Iterator[list[BulkDocument]]:
        root = path if path.is_dir() else path.parent
        files = sorted(
            p
            for p in ([path] if path.is_file() else path.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
        )
        for start in range(0, len(files), FILE_GROUP):
            group = []
            for file in files[start : start + FILE_GROUP]:
                # A file over the limit is recorded as failed from its size: it is never read into memory.
                try:
                    size = file.stat().st_size
                    data = file.read_bytes() if size <= settings.MAX_UPLOAD_BYTES else b""
                except OSError as exc:
                    # Not stored, so a re-run once it can be read takes it up; the others go on.
                    self.stderr.write(
                        f"could not read {file.relative_to(root)} ({exc.strerror or exc}); skipped: run the import "
                        "again once it can be read."
                    )
                    continue
                group.append(
                    BulkDocument(
                        title=file.name,
                        external_id=str(file.relative_to(root)),
                        file_name=file.name,
                        file_bytes=data,
                        file_size=size,
                    )
                )
            yield group

    def _wait(self, tenant: Tenant, document_ids: list[int], timeout: float) -> None:
        from tqdm import tqdm

        deadline = time.monotonic() + timeout
        final = (DocumentStatus.INDEXED, DocumentStatus.FAILED)
        with tqdm(total=len(document_ids), unit="doc", desc="indexing", file=self.stderr._out) as bar:
            finished = 0
            while finished < len(document_ids):
                if time.monotonic() > deadline:
                    raise CommandError("Timed out waiting for indexing; the documents stay queued.")
                time.sleep(0.5)
                now_finished = 0
                for start in range(0, len(document_ids), 900):
                    now_finished += (
                        Document.objects.for_tenant(tenant)
                        .filter(pk__in=document_ids[start : start + 900], status__in=final)
                        .count()
                    )
                bar.update(now_finished - finished)
                finished = now_finished
        failed = []
        for start in range(0, len(document_ids), 900):
            failed += list(
                Document.objects.for_tenant(tenant)
                .filter(pk__in=document_ids[start : start + 900], status=DocumentStatus.FAILED)
                .values_list("title", "error_message")
            )
        for title, message in failed:
            self.stderr.write(f"failed: {title}: {message}")
        self.stdout.write(f"Indexed {len(document_ids) - len(failed)} document(s), {len(failed)} failed.")
