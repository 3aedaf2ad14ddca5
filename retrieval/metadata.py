"""A document's metadata and the metadata filters of searches: what is accepted, pure.

A document's `metadata` is a JSON object the client describes it with (`{"lang": "en", "product": "a"}`). It is
stored on the document and copied onto every vector of it, so a search filters by it inside Milvus, with the
tenant clause and the grouping and exclusions of the same search. Bounded so that one document cannot make every
vector of a knowledge base heavy: at most METADATA_MAX_BYTES of JSON, METADATA_MAX_DEPTH levels, keys of
`vectorstore.METADATA_KEY` (letters, digits, `_`; what a filter clause can name without quoting), strings of at
most METADATA_STRING_MAX characters.

A metadata filter names top-level keys: a scalar value matches documents whose key equals it, a list matches any
of its values (`{"lang": "en", "product": ["a", "b"]}`: lang is en AND product is a or b).
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Mapping

from kbplatform.text import has_lone_surrogate
from retrieval.milvus import METADATA_KEY

METADATA_MAX_BYTES = 4096
METADATA_MAX_DEPTH = 3
METADATA_MAX_KEYS = 64
METADATA_STRING_MAX = 1000
METADATA_LIST_MAX = 100
FILTER_MAX_KEYS = 10
FILTER_VALUES_MAX = 100
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Scalar = str | int | bool


class MetadataError(ValueError):
    """Metadata or a metadata filter that is refused; the message says what and how to fix it."""


def _string_check(value: str, *, where: str, filtering: bool = False) -> None:
    """Strings are stored as UTF-8 (PostgreSQL's jsonb refuses NUL) and a filter is a Milvus expression literal,
    which escapes quotes and backslashes but no control character: a lone surrogate or NUL is refused anywhere, a
    control character in a filter value."""
    if len(value) > METADATA_STRING_MAX:
        raise MetadataError(f"{where}: strings are at most {METADATA_STRING_MAX} characters.")
    if "\x00" in value or has_lone_surrogate(value):
        raise MetadataError(f"{where}: strings hold no NUL character and no lone surrogate (not valid UTF-8).")
    if filtering and any(unicodedata.category(ch) == "Cc" for ch in value):
        raise MetadataError(f"{where}: filter values hold no control characters (tabs, line breaks and the like).")


def _key_check(key: object, where: str) -> str:
    if not isinstance(key, str) or not METADATA_KEY.fullmatch(key):
        raise MetadataError(
            f"{where}: key {key!r} is not allowed; keys are 1 to 64 letters, digits or underscores, starting with a "
            "letter or underscore."
        )
    return key


def _value_check(value: object, *, where: str, depth: int) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise MetadataError(f"{where}: integers must fit in 64 bits.")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MetadataError(f"{where}: numbers must be finite.")
        return
    if isinstance(value, str):
        _string_check(value, where=where)
        return
    if depth >= METADATA_MAX_DEPTH and isinstance(value, (list, dict)):
        raise MetadataError(f"{where}: metadata nests at most {METADATA_MAX_DEPTH} levels deep.")
    if isinstance(value, list):
        if len(value) > METADATA_LIST_MAX:
            raise MetadataError(f"{where}: lists hold at most {METADATA_LIST_MAX} values.")
        for index, item in enumerate(value):
            _value_check(item, where=f"{where}[{index}]", depth=depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _value_check(item, where=f"{where}.{_key_check(key, where)}", depth=depth + 1)
        return
    raise MetadataError(f"{where}: {type(value).__name__} is not a JSON value.")


def metadata_validate(value: object) -> dict:
    """`value` as a document's metadata, or MetadataError naming what is wrong."""
    if not isinstance(value, Mapping):
        raise MetadataError('metadata must be a JSON object, such as {"lang": "en"}.')
    value = dict(value)
    if len(value) > METADATA_MAX_KEYS:
        raise MetadataError(f"metadata holds at most {METADATA_MAX_KEYS} keys.")
    for key, item in value.items():
        _value_check(item, where=f"metadata.{_key_check(key, 'metadata')}", depth=1)
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > METADATA_MAX_BYTES:
        raise MetadataError(f"metadata is {size} bytes of JSON; at most {METADATA_MAX_BYTES} are allowed.")
    return value


def _filter_value_check(value: object, where: str) -> Scalar:
    if isinstance(value, bool) or isinstance(value, str):
        if isinstance(value, str):
            _string_check(value, where=where, filtering=True)
        return value
    if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        return value
    raise MetadataError(f"{where}: filter values are strings, integers or booleans (or a list of them).")


def metadata_filter_validate(value: object) -> dict[str, Scalar | list[Scalar]]:
    """`value` as a metadata filter (key -> value, or key -> non-empty list of values), or MetadataError."""
    if not isinstance(value, Mapping):
        raise MetadataError('metadata_filter must be a JSON object, such as {"lang": "en", "product": ["a", "b"]}.')
    if len(value) > FILTER_MAX_KEYS:
        raise MetadataError(f"metadata_filter names at most {FILTER_MAX_KEYS} keys.")
    checked: dict[str, Scalar | list[Scalar]] = {}
    for key, item in value.items():
        where = f"metadata_filter.{_key_check(key, 'metadata_filter')}"
        if isinstance(item, list):
            if not item or len(item) > FILTER_VALUES_MAX:
                raise MetadataError(f"{where}: a list of values holds 1 to {FILTER_VALUES_MAX} values.")
            checked[key] = [_filter_value_check(v, f"{where}[{i}]") for i, v in enumerate(item)]
        else:
            checked[key] = _filter_value_check(item, where)
    return checked


def metadata_filter_key(value: Mapping[str, object] | None) -> str:
    """A canonical name of the documents a metadata filter keeps: "" for no filter (None or {}), else a SHA-256 hex
    digest of the filter with keys sorted and each list of values deduplicated and sorted (a list of one value
    written as that value). Two filters with the same key keep the same documents; the converse need not hold (a
    filter given as `{"n": true}` and `{"n": 1}` get different keys), which costs at most a fresh answer where a
    stored one would have done. Only for filters that passed `metadata_filter_validate`."""
    if not value:
        return ""
    canonical: dict[str, object] = {}
    for key in sorted(value):
        wanted = value[key]
        values = wanted if isinstance(wanted, list) else [wanted]
        # JSON tells a boolean from a number from a string, so sorting by it never equates two different values.
        distinct = sorted({json.dumps(v, ensure_ascii=False) for v in values})
        canonical[key] = [json.loads(v) for v in distinct] if len(distinct) > 1 else json.loads(distinct[0])
    text = json.dumps(canonical, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
