"""`manage.py milvus_collections [--drop-unused | --drop NAME ...] [--dry-run]`: this deployment's Milvus collections
(those named after MILVUS_COLLECTION) with their entities and roles, and the drop of question collections of
embedding models no unexpired conversation uses any more (docs/operations.md, "Re-index after a model change").

Run it with the settings of the web and worker hosts: "the models in use" are the ones EMBEDDING_MODELS offers here.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from conversations.dedup.question_collections import (
    CHUNKS,
    QUESTIONS,
    DeploymentCollection,
    collection_drop_refusal,
    deployment_collections,
    live_turns_text,
    plural,
    question_collections_drop,
)
from kbplatform.errors import ApplicationError
from retrieval import embeddings, vectorstore


def _role(collection: DeploymentCollection) -> str:
    if collection.kind == CHUNKS:
        if collection.name == settings.MILVUS_COLLECTION:
            return "chunks (MILVUS_COLLECTION)"
        if collection.name in vectorstore.model_chunk_collection_names():
            return "chunks (an offered model's own)"
        return "chunks (full text, beside MILVUS_COLLECTION)"
    if collection.kind != QUESTIONS:
        return "other: not named as this deployment's collections are, never dropped"
    if collection.in_use:
        return f"questions, model in use ({collection.model})"
    model = f"model {collection.model}" if collection.model else "from before models were recorded"
    if collection_drop_refusal(collection) is None:
        return f"questions, {model}: no unexpired turn, may be dropped"
    return f"questions, {model}: {live_turns_text(collection)}, kept"


class Command(BaseCommand):
    help = (
        "List this deployment's Milvus collections (named after MILVUS_COLLECTION) with their entities and roles; "
        "drop question collections of embedding models no unexpired conversation uses."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--drop-unused",
            action="store_true",
            help="drop every question collection of another model that no unexpired turn references",
        )
        parser.add_argument(
            "--drop",
            action="append",
            default=[],
            metavar="NAME",
            help="drop this collection (repeatable); refused, and nothing dropped, unless each may go",
        )
        parser.add_argument("--dry-run", action="store_true", help="with --drop-unused or --drop: only say what goes")

    def handle(self, *args: Any, **options: Any) -> None:
        drop_unused, named, dry_run = options["drop_unused"], options["drop"], options["dry_run"]
        if drop_unused and named:
            raise CommandError("Give either --drop-unused or --drop NAME, not both.")
        if dry_run and not (drop_unused or named):
            raise CommandError("--dry-run goes with --drop-unused or --drop NAME.")
        if not embeddings.model_path().is_dir():
            raise CommandError(
                f"The embedding model is not at {embeddings.model_path()}: run this with the settings of the web and "
                "worker hosts, so that the model in use is known."
            )
        try:
            if drop_unused or named:
                self._drop(names=named or None, dry_run=dry_run)
            else:
                self._list()
        except vectorstore.VectorStoreUnavailable as exc:
            raise CommandError(f"Milvus is unavailable ({exc}). Check MILVUS_URI, then run this again.") from exc
        except DatabaseError as exc:
            raise CommandError(f"The database is unavailable ({exc}). Run this again once it answers.") from exc
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    def _list(self) -> None:
        collections = deployment_collections()
        self.stdout.write(
            f"Collections named after MILVUS_COLLECTION={settings.MILVUS_COLLECTION!r}; embedding models in use: "
            + ", ".join(f"{model} ({embeddings.model_id(model)})" for model in embeddings.offered_models())
            + "."
        )
        if not collections:
            self.stdout.write("None exists yet.")
            return
        width = max(len(collection.name) for collection in collections)
        self.stdout.write(f"{'NAME':<{width}}  {'ENTITIES':>10}  ROLE")
        for collection in collections:
            self.stdout.write(f"{collection.name:<{width}}  {collection.entities:>10}  {_role(collection)}")

    def _drop(self, *, names: list[str] | None, dry_run: bool) -> None:
        if names is None:
            self._list()
        dropped = question_collections_drop(names=names, dry_run=dry_run)
        verb = "Would drop" if dry_run else "Dropped"
        for collection in dropped:
            self.stdout.write(f"{verb} {collection.name} ({plural(collection.entities, 'entity', 'entities')}).")
        if not dropped:
            self.stdout.write("No question collection may be dropped now.")
