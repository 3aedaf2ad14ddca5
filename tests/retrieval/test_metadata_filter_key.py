"""`metadata_filter_key`: equal for filters that keep the same documents however they are written, different for
filters that keep other documents, pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval import question_index
from retrieval.metadata import metadata_filter_key

values = st.one_of(st.text(max_size=10), st.integers(min_value=-5, max_value=5), st.booleans())
filters = st.dictionaries(
    st.from_regex(r"[a-z]{1,4}", fullmatch=True),
    st.one_of(values, st.lists(values, min_size=1, max_size=4)),
    max_size=4,
)


def test_no_filter_has_the_empty_key_and_any_filter_another():
    assert metadata_filter_key(None) == metadata_filter_key({}) == ""
    key = metadata_filter_key({"lang": "en"})
    assert len(key) == 64 and question_index.filter_key_checked(key) == key


@pytest.mark.parametrize(
    "first, second",
    [
        ({"lang": "en", "product": "a"}, {"product": "a", "lang": "en"}),
        ({"product": ["a", "b"]}, {"product": ["b", "a", "b"]}),
        ({"product": "a"}, {"product": ["a"]}),
        ({"product": ["a", "a"]}, {"product": "a"}),
    ],
)
def test_one_filter_written_otherwise_has_the_same_key(first, second):
    assert metadata_filter_key(first) == metadata_filter_key(second)


@pytest.mark.parametrize(
    "first, second",
    [
        ({"lang": "en"}, {"lang": "de"}),
        ({"lang": "en"}, {"lang": "en", "product": "a"}),
        ({"product": ["a", "b"]}, {"product": "a"}),
        ({"n": 1}, {"n": "1"}),
        ({"n": 1}, {"n": True}),
        ({"a": "b"}, {"b": "a"}),
        ({"lang": "en"}, {}),
    ],
)
def test_filters_that_keep_other_documents_have_other_keys(first, second):
    assert metadata_filter_key(first) != metadata_filter_key(second)


@given(metadata_filter=filters, data=st.data())
def test_the_key_ignores_order_and_repeats_but_not_values(metadata_filter, data):
    shuffled = {
        key: (data.draw(st.permutations(value)) + value[:1] if isinstance(value, list) else value)
        for key, value in reversed(list(metadata_filter.items()))
    }
    assert metadata_filter_key(shuffled) == metadata_filter_key(metadata_filter)
    canonical = {
        k: sorted({repr((type(v).__name__, v)) for v in (w if isinstance(w, list) else [w])})
        for k, w in metadata_filter.items()
    }
    other = data.draw(filters)
    other_canonical = {
        k: sorted({repr((type(v).__name__, v)) for v in (w if isinstance(w, list) else [w])}) for k, w in other.items()
    }
    assert (metadata_filter_key(other) == metadata_filter_key(metadata_filter)) == (other_canonical == canonical)


@pytest.mark.parametrize("key", ["x", "A" * 64, '" or tenant_id != "', "0" * 63])
def test_only_a_key_reaches_a_question_filter(key):
    with pytest.raises(ValueError):
        question_index.question_filter_build(tenant_id=1, metadata_filter_key=key)
