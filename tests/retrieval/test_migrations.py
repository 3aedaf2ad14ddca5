"""Schema migrations of the retrieval app on `retrieval_chunk`, which holds millions of rows in production.

A plain CREATE INDEX reads the whole table while writes to it wait (every ingestion run stalls); run in the migration
that also adds a column, it would hold that ALTER TABLE's ACCESS EXCLUSIVE lock all the while, so reads wait too (every
search and turn). An index on it is therefore built CONCURRENTLY on PostgreSQL, outside any transaction."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from conversations.models import Turn
from retrieval.models import Chunk, Document, KnowledgeBase

INDEX = "chunk_tenant_model_input_hash"
COLUMN_ADDED = [("retrieval", "0009_chunk_model_input_hash")]
INDEX_ADDED = ("retrieval", "0010_chunk_model_input_hash_index")


def _migrate(targets) -> None:
    MigrationExecutor(connection).migrate(targets)


def _leaf() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _index_state() -> tuple[bool, bool | None]:
    """(whether the index exists, whether PostgreSQL holds it valid: None elsewhere)."""
    with connection.cursor() as cursor:
        exists = INDEX in connection.introspection.get_constraints(cursor, Chunk._meta.db_table)
        if not exists or connection.vendor != "postgresql":
            return exists, None
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [INDEX])
        return exists, cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_the_model_input_hash_index_is_built_concurrently_outside_any_transaction():
    _migrate([("retrieval", "0008_knowledge_base_model_identity")])
    statements: list[tuple[str, bool]] = []

    def record(execute, sql, params, many, context):
        statements.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    # Recorded up to the index's own migration only: on SQLite a later migration that alters retrieval_chunk
    # remakes the table and with it every index, which is SQLite's way and not a second build of this one.
    try:
        with connection.execute_wrapper(record):
            _migrate([INDEX_ADDED])
    finally:
        _migrate(_leaf())

    builds = [(sql, atomic) for sql, atomic in statements if "CREATE INDEX" in sql.upper() and INDEX in sql]
    assert len(builds) == 1, builds
    sql, in_transaction = builds[0]
    if connection.vendor == "postgresql":
        assert "CONCURRENTLY" in sql.upper(), sql
        assert not in_transaction, "CREATE INDEX CONCURRENTLY cannot run in a transaction, nor should the build"
    assert _index_state() == (True, True if connection.vendor == "postgresql" else None)


def _two_chunks_of_one_tenant(tenant) -> None:
    """Written through the models as of COLUMN_ADDED: today's have columns that schema does not have yet."""
    models = MigrationExecutor(connection).loader.project_state(COLUMN_ADDED).apps
    kb = models.get_model("retrieval", "KnowledgeBase").objects.create(tenant_id=tenant.pk, name="kb")
    document = models.get_model("retrieval", "Document").objects.create(
        tenant_id=tenant.pk, knowledge_base=kb, title="d"
    )
    for position in range(2):
        models.get_model("retrieval", "Chunk").objects.create(
            tenant_id=tenant.pk, document=document, knowledge_base=kb, position=position, text="x", content_hash="h"
        )


@pytest.mark.django_db(transaction=True)
def test_the_index_migration_keeps_an_index_already_built_and_rebuilds_one_a_failed_build_left(tenant):
    """A database that ran the first version of 0009 (which built the index with the column) already has it; a
    concurrent build that failed (a timeout, a cancelled deploy) leaves an INVALID index of the name, which PostgreSQL
    keeps up to date but never reads: the migration must not stop at either, and must end with a valid index."""
    table = connection.ops.quote_name(Chunk._meta.db_table)
    _migrate(COLUMN_ADDED)
    try:
        assert _index_state()[0] is False
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE INDEX {INDEX} ON {table} (tenant_id, model_input_hash) WHERE NOT (model_input_hash = '')"
            )
        _migrate(_leaf())
        assert _index_state() == (True, True if connection.vendor == "postgresql" else None)

        if connection.vendor == "postgresql":
            _migrate(COLUMN_ADDED)
            _two_chunks_of_one_tenant(tenant)
            # A concurrent build that fails half way (here on a uniqueness the rows break) leaves its index invalid.
            with connection.cursor() as cursor, pytest.raises(Exception, match="could not create unique index"):
                cursor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {INDEX} ON {table} (tenant_id)")
            assert _index_state() == (True, False)
            _migrate(_leaf())
            assert _index_state() == (True, True)
    finally:
        _migrate(_leaf())


# The last release's schema: its code (the old web and workers, still serving while `migrate` runs, as
# docs/operations.md says) knows none of the columns the later migrations add.
LAST_RELEASE = [("retrieval", "0008_knowledge_base_model_identity"), ("conversations", "0010_embedding_model_ids")]


@pytest.mark.django_db(transaction=True)
def test_the_last_releases_code_still_writes_once_the_new_migrations_have_run(tenant):
    """Its INSERTs leave the new columns out, so each must keep a default in the database itself (Django drops the
    default it adds a column with): else every turn, upload, indexing run and knowledge base the old processes write
    between `migrate` and their restart fails on a NOT NULL column."""
    _migrate(_leaf())
    models = MigrationExecutor(connection).loader.project_state(LAST_RELEASE).apps
    kb = models.get_model("retrieval", "KnowledgeBase").objects.create(tenant_id=tenant.pk, name="kb")
    document = models.get_model("retrieval", "Document").objects.create(
        tenant_id=tenant.pk, knowledge_base=kb, title="d"
    )
    models.get_model("retrieval", "Chunk").objects.create(
        tenant_id=tenant.pk, document=document, knowledge_base=kb, position=0, text="x", content_hash="h"
    )
    conversation = models.get_model("conversations", "Conversation").objects.create(
        tenant_id=tenant.pk, knowledge_base=kb, expires_at=timezone.now()
    )
    models.get_model("conversations", "Turn").objects.create(
        tenant_id=tenant.pk,
        conversation=conversation,
        knowledge_base=kb,
        number=1,
        question="q",
        question_vector=b"",
        decision="answered",
    )

    kb = KnowledgeBase.objects.for_tenant(tenant).get(pk=kb.pk)
    assert kb.reindex_from_model_identity == ""
    assert Document.objects.for_tenant(tenant).get(pk=document.pk).queue_token == ""
    assert Chunk.objects.for_tenant(tenant).get(document_id=document.pk).model_input_hash == ""
    assert Turn.objects.for_tenant(tenant).get(conversation_id=conversation.pk).partial_index is False
