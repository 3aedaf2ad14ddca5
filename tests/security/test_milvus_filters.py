"""Every Milvus filter the code builds names the tenant, whatever the inputs.

Three layers: `filter_build` itself (a property over arbitrary ids, including hostile strings); every public
function of the modules built on the Milvus client (`retrieval.milvus`, `retrieval.vectorstore`,
`retrieval.question_index`) that sends a filter, run against a recording client with arbitrary arguments; and a static
check that no function sends a filter without taking a `tenant_id`, and that no other module talks to Milvus.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval import milvus, question_index, vectorstore

ROOT = Path(__file__).resolve().parents[2]
ids = st.integers(min_value=-(2**63), max_value=2**63 - 1)
id_lists = st.one_of(st.none(), st.lists(ids, max_size=20), st.sets(ids, max_size=20))
tenant_ids = st.integers(min_value=1, max_value=2**62)
hostile = st.one_of(
    st.text(max_size=40),
    st.sampled_from(['1 or tenant_id == "t2"', '" or 1==1 or "', "1]) or (tenant_id != ''", "t2", "", "1e3"]),
)


# A question's metadata filter key: "" or 64 hex digits, quoted.
_FILTER_KEY_CLAUSE = re.compile(rf'{question_index.QUESTION_FILTER_FIELD} == "([0-9a-f]{{64}})?"')


def _plain_clause(clause: str) -> bool:
    return bool(
        re.fullmatch(r"\w+ (==|>=|in|not in) (-?\d+|\[-?\d+(, -?\d+)*\])", clause)
        or _FILTER_KEY_CLAUSE.fullmatch(clause)
    )


def assert_names_tenant(expression: str, tenant_id: int) -> None:
    """The tenant clause comes first, is joined by `and` only, and no other clause mentions the tenant."""
    clauses = expression.split(" and ")
    assert clauses[0] == f'tenant_id == "t{tenant_id}"', expression
    assert expression.count("tenant_id") == 1, expression
    assert not re.search(r"\bor\b|\bnot\s*\(|\|\|", expression.replace("not in", "")), expression
    for clause in clauses[1:]:
        assert _plain_clause(clause), clause


# A metadata literal: an integer, true/false, or a JSON string (escapes included, no bare quote inside).
_LITERAL = r'(-?\d+|true|false|"(?:[^"\\]|\\.)*")'
_METADATA_EQ = rf'metadata\["[A-Za-z_][A-Za-z0-9_]{{0,63}}"\] == {_LITERAL}'
_METADATA_CLAUSE = re.compile(rf"{_METADATA_EQ}|\({_METADATA_EQ}(?: or {_METADATA_EQ})*\)")


def _split_top_level(expression: str) -> list[str]:
    """The expression's clauses joined by ` and ` outside string literals and parentheses."""
    clauses, depth, quoted, escaped, start = [], 0, False, False, 0
    for index, char in enumerate(expression):
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
            continue
        if char == '"':
            quoted = True
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth == 0 and expression.startswith(" and ", index):
            clauses.append(expression[start:index])
            start = index + 5
    clauses.append(expression[start:])
    return clauses


def assert_metadata_filter_names_the_tenant(expression: str, tenant_id: int) -> None:
    """With metadata clauses: the tenant clause first, every other clause joined by a top-level `and`, and each
    metadata clause an equality (or a parenthesised `or` of equalities) on one safe key with a quoted value, so no
    value or key can end its clause early and widen the filter past the tenant."""
    clauses = _split_top_level(expression)
    assert clauses[0] == f'tenant_id == "t{tenant_id}"', expression
    for clause in clauses[1:]:
        if clause.startswith(("metadata[", "(metadata[")):
            assert _METADATA_CLAUSE.fullmatch(clause), clause
        else:
            assert _plain_clause(clause), clause


metadata_values = st.one_of(st.text(max_size=30), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.booleans())
metadata_keys = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), hostile)
metadata_filters = st.dictionaries(
    metadata_keys, st.one_of(metadata_values, st.lists(metadata_values, min_size=1, max_size=5)), max_size=4
)


@given(tenant_id=tenant_ids, metadata_filter=metadata_filters, exclude_document_ids=id_lists)
def test_metadata_filters_never_widen_past_the_tenant(tenant_id, metadata_filter, exclude_document_ids):
    try:
        expression = vectorstore.filter_build(
            tenant_id=tenant_id,
            knowledge_base_id=7,
            exclude_document_ids=exclude_document_ids,
            metadata_filter=metadata_filter,
        )
    except (ValueError, TypeError):
        # Refused: only for a key outside the safe pattern (values of these types are always quoted).
        assert any(not vectorstore.METADATA_KEY.fullmatch(key) for key in metadata_filter)
        return
    assert_metadata_filter_names_the_tenant(expression, tenant_id)
    assert len(_split_top_level(expression)) == 2 + bool(exclude_document_ids) + len(metadata_filter)


@pytest.mark.parametrize(
    "metadata_filter",
    [
        {'lang"] == "en" or tenant_id != "': "x"},
        {"lang": ['en" or tenant_id != "t1']},
        {"lang": 1.5},
        {"lang": None},
        {"lang": []},
        {"lang": {"nested": "x"}},
    ],
)
def test_a_metadata_filter_that_could_not_be_written_safely_is_refused(metadata_filter):
    try:
        expression = vectorstore.filter_build(tenant_id=1, metadata_filter=metadata_filter)
    except (ValueError, TypeError):
        return
    assert_metadata_filter_names_the_tenant(expression, 1)  # a hostile value, quoted: still one clause of its own


@given(
    tenant_id=tenant_ids,
    knowledge_base_id=st.one_of(st.none(), ids),
    document_ids=id_lists,
    exclude_document_ids=id_lists,
    exclude_chunk_ids=id_lists,
)
def test_filter_build_always_names_the_tenant_first(
    tenant_id, knowledge_base_id, document_ids, exclude_document_ids, exclude_chunk_ids
):
    expression = vectorstore.filter_build(
        tenant_id=tenant_id,
        knowledge_base_id=knowledge_base_id,
        document_ids=document_ids,
        exclude_document_ids=exclude_document_ids,
        exclude_chunk_ids=exclude_chunk_ids,
    )
    assert_names_tenant(expression, tenant_id)
    assert "[]" not in expression  # real Milvus rejects an empty list


@given(tenant_id=tenant_ids, value=hostile, where=st.sampled_from(["knowledge_base_id", "document_ids"]))
def test_hostile_values_never_reach_the_expression(tenant_id, value, where):
    kwargs = {"knowledge_base_id": value} if where == "knowledge_base_id" else {"document_ids": [value]}
    try:
        expression = vectorstore.filter_build(tenant_id=tenant_id, **kwargs)
    except (ValueError, TypeError):
        return  # refused: nothing was built
    assert_names_tenant(expression, tenant_id)


@pytest.mark.parametrize("tenant_id", [None, "1 or 1==1", "t2"])
def test_no_tenant_no_filter(tenant_id):
    with pytest.raises((ValueError, TypeError)):
        vectorstore.filter_build(tenant_id=tenant_id)


class RecordingClient:
    """Stands in for MilvusClient: records every `filter` sent, answers like an empty collection."""

    def __init__(self) -> None:
        self.filters: list[str] = []
        self.hybrid_requests: list[list[str]] = []  # per hybrid search, the filter of each of its sub-requests

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            if "filter" in kwargs:
                self.filters.append(kwargs["filter"])
            if name == "hybrid_search":
                self.hybrid_requests.append([request.expr for request in kwargs["reqs"]])
                self.filters.extend(self.hybrid_requests[-1])
            if name in ("search", "hybrid_search"):
                return [[]]
            if name == "query":
                return [{"count(*)": 0}]
            if name == "has_collection":
                return True
            if name == "list_collections":  # both kinds of question collection, and one of another deployment
                return [question_index.question_collection_name(model=m) for m in ("", "0a1b2c3d4e5f")] + ["other"]
            if name == "describe_collection":
                names = (
                    "chunk_id",
                    "tenant_id",
                    "knowledge_base_id",
                    "doc_id",
                    "text",
                    "sparse",
                    "text_zh",
                    "sparse_zh",
                    "metadata",
                    question_index.QUESTION_FILTER_FIELD,
                )
                return {"fields": [{"name": f} for f in names]}
            return None

        return call


MILVUS_MODULES = {"milvus": milvus, "vectorstore": vectorstore, "question_index": question_index}


def _filter_senders() -> list[str]:
    """Functions of the Milvus modules that pass a filter to the client (`filter=` or a `{"filter": ...}` of kwargs),
    as `module.function`."""
    senders = []
    for module_name, module in MILVUS_MODULES.items():
        senders.extend(f"{module_name}.{name}" for name in _module_filter_senders(module))
    return senders


def _module_filter_senders(module: object) -> list[str]:
    tree = ast.parse(inspect.getsource(module))
    senders = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for inner in ast.walk(node):
                keyword = isinstance(inner, ast.Call) and any(k.arg == "filter" for k in inner.keywords)
                in_dict = isinstance(inner, ast.Dict) and any(
                    isinstance(k, ast.Constant) and k.value == "filter" for k in inner.keys
                )
                if keyword or in_dict:
                    senders.append(node.name)
                    break
    return senders


SENDERS = _filter_senders()
ARGUMENTS = {
    "tenant_id": tenant_ids,
    "knowledge_base_id": st.one_of(st.none(), ids),
    "dimension": st.just(4),
    "query_vector": st.just([0.5, 0.5, 0.5, 0.5]),
    "limit": st.integers(min_value=1, max_value=50),
    "collection": st.just("kb_property_test"),
    "created_after": st.one_of(st.none(), ids),
    "group_by_document": st.booleans(),
    "model": st.sampled_from(["", "0a1b2c3d4e5f"]),
    "mode": st.sampled_from(vectorstore.RETRIEVAL_MODES),
    "query_text": st.one_of(hostile.filter(str.strip), st.just('tenant_id == "t2"')),
    "analyzer": st.sampled_from(sorted(vectorstore.TEXT_FIELDS)),
    "full_text": st.just(True),
    "dense_weight": st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0)),
    "metadata_filter": st.one_of(st.none(), metadata_filters),
    "metadata_filter_key": st.one_of(st.just(""), st.from_regex(r"[0-9a-f]{64}", fullmatch=True), hostile),
}


def test_every_filter_sender_takes_a_tenant():
    assert {
        "vectorstore.vectors_search",
        "vectorstore.vectors_delete",
        "vectorstore.vectors_count",
        "question_index.question_vectors_search",
        "question_index.question_vectors_delete",
    } <= set(SENDERS)
    for name in SENDERS:
        parameters = inspect.signature(_sender(name)).parameters
        assert "tenant_id" in parameters, f"{name} sends a filter but takes no tenant_id"


def _sender(name: str):
    module_name, function_name = name.split(".")
    return getattr(MILVUS_MODULES[module_name], function_name)


@pytest.mark.parametrize("name", SENDERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_filter_sent_to_milvus_names_the_tenant(name, data):
    function = _sender(name)
    kwargs = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in ARGUMENTS:
            kwargs[parameter.name] = data.draw(ARGUMENTS[parameter.name], label=parameter.name)
        elif parameter.name.endswith("_ids"):
            kwargs[parameter.name] = data.draw(st.lists(ids, max_size=10), label=parameter.name)
        elif parameter.default is inspect.Parameter.empty:
            pytest.fail(f"teach this test a strategy for {name}({parameter.name}=...)")
    unscoped = kwargs.get("document_ids") is None and kwargs.get("knowledge_base_id") is None
    if name == "vectorstore.vectors_delete" and unscoped:
        kwargs["knowledge_base_id"] = 1
    client = RecordingClient()
    with (
        mock.patch.object(milvus, "connect", return_value=client),
        mock.patch.object(milvus, "_ready_collections", set()),
    ):
        try:
            function(**kwargs)
        except ValueError:
            return  # refused before building anything (e.g. a delete naming no knowledge base)
    for expression in client.filters:
        if 'metadata["' in expression:
            assert_metadata_filter_names_the_tenant(expression, kwargs["tenant_id"])
        else:
            assert_names_tenant(expression, kwargs["tenant_id"])


@settings(max_examples=100, deadline=None)
@given(
    tenant_id=tenant_ids,
    exclude_document_ids=id_lists,
    exclude_chunk_ids=id_lists,
    group_by_document=st.booleans(),
    dense_weight=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0)),
    query_text=hostile.filter(str.strip),
)
def test_every_sub_request_of_a_hybrid_search_carries_the_whole_filter(
    tenant_id, exclude_document_ids, exclude_chunk_ids, group_by_document, dense_weight, query_text
):
    """Fusion ranks whatever either side brings: a sub-request without the tenant's clause (or without the exclusions)
    would let another tenant's chunk, or an excluded one, into the results."""
    client = RecordingClient()
    with (
        mock.patch.object(milvus, "connect", return_value=client),
        mock.patch.object(milvus, "_ready_collections", set()),
    ):
        vectorstore.vectors_search(
            tenant_id=tenant_id,
            knowledge_base_id=7,
            query_vector=[0.5, 0.5, 0.5, 0.5],
            limit=5,
            dimension=4,
            exclude_document_ids=exclude_document_ids,
            exclude_chunk_ids=exclude_chunk_ids,
            group_by_document=group_by_document,
            collection="kb_property_test",
            mode=vectorstore.HYBRID,
            query_text=query_text,
            dense_weight=dense_weight,
        )
    (sub_filters,) = client.hybrid_requests
    expected = vectorstore.filter_build(
        tenant_id=tenant_id,
        knowledge_base_id=7,
        exclude_document_ids=exclude_document_ids,
        exclude_chunk_ids=exclude_chunk_ids,
    )
    assert len(sub_filters) == 2
    for expression in sub_filters:
        assert expression == expected
        assert_names_tenant(expression, tenant_id)


@given(
    mode=st.sampled_from(vectorstore.RETRIEVAL_MODES),
    tenant_id=tenant_ids,
    limit=st.integers(min_value=1, max_value=5000),
    query_text=hostile.filter(str.strip),
)
def test_search_requests_build_puts_the_filter_on_every_field_search(mode, tenant_id, limit, query_text):
    expression = vectorstore.filter_build(tenant_id=tenant_id, knowledge_base_id=1, exclude_document_ids=[3])
    requests = vectorstore.search_requests_build(
        mode=mode, expression=expression, limit=limit, query_vector=[0.0, 1.0], query_text=query_text
    )
    assert len(requests) == (2 if mode == vectorstore.HYBRID else 1)
    assert all(request.expr == expression for request in requests)
    with pytest.raises(ValueError, match="name the tenant"):
        vectorstore.search_requests_build(
            mode=mode, expression="knowledge_base_id == 1", limit=limit, query_vector=[0.0], query_text=query_text
        )


MILVUS_CLIENT_MODULES = (Path("retrieval/milvus.py"), Path("retrieval/vectorstore.py"))


def test_only_the_milvus_modules_import_pymilvus():
    """The client lives in retrieval/milvus.py; vectorstore builds hybrid requests from pymilvus's ranker types."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in (".venv", "var", "tests", "bench") or relative in MILVUS_CLIENT_MODULES:
            continue
        if re.search(r"^\s*(from|import)\s+pymilvus", path.read_text(errors="replace"), re.MULTILINE):
            offenders.append(str(relative))
    assert not offenders, f"only {MILVUS_CLIENT_MODULES} may import pymilvus: {offenders}"
