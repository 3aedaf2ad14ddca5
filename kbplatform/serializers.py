"""Input serializers that refuse what they do not know.

DRF drops a field a serializer does not declare without a word. A misspelt name (`shadowmode`, `forceRefresh`,
`knowledge_base_id`, `?page=2`) then falls back to the default and the request does something else than the client
asked for, with a 2xx that hides it. These serializers answer 400 instead, naming each unknown field and the ones
the endpoint takes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from django.http import QueryDict
from rest_framework import serializers

# The largest OFFSET PostgreSQL takes (a bigint): a paged list bounds its `offset` by it, since past it the query fails
# instead of returning an empty page.
MAX_OFFSET = 2**63 - 1
# The largest id a row can have (a bigint primary key). An id past it names no row, and a lookup by it fails in the
# database driver (an overflow) instead of finding nothing, so an id a request names is bounded by it: a 400.
ID_MAX = 2**63 - 1


def id_field(**kwargs: Any) -> serializers.IntegerField:
    """A request's id of a row: an integer from 1 to ID_MAX."""
    return serializers.IntegerField(min_value=1, max_value=ID_MAX, **kwargs)


MULTI_VALUED_FIELDS = (serializers.ListField, serializers.MultipleChoiceField, serializers.ListSerializer)


class StrictInputSerializer(serializers.Serializer):
    """A request body (or query string) whose every field must be one the serializer declares, given once unless it
    takes a list. The schema says so (`additionalProperties: false`, kbplatform.schema). Unknown and repeated fields
    are reported together with any invalid ones."""

    def unknown_field_errors(self, data: Any) -> dict[str, list[str]]:
        if not isinstance(data, Mapping):
            return {}
        known = list(self.fields)
        errors: dict[str, list[str]] = {}
        for name in sorted(str(name) for name in data if name not in self.fields):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]}?" if close else ""
            errors[name] = [f"Unknown field.{hint} This endpoint takes {', '.join(known)}."]
        return errors

    def repeated_field_errors(self, data: Any) -> dict[str, list[str]]:
        """A query string or form body gives a field several times; DRF keeps the last value of one that takes a
        single value, so `?action=a&action=b` meant `?action=b`."""
        if not isinstance(data, QueryDict):
            return {}
        return {
            name: [f"Give {name} once; it takes a single value."]
            for name, values in data.lists()
            if len(values) > 1 and name in self.fields and not isinstance(self.fields[name], MULTI_VALUED_FIELDS)
        }

    def to_internal_value(self, data: Any) -> Any:
        refused = {**self.unknown_field_errors(data), **self.repeated_field_errors(data)}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if refused and isinstance(exc.detail, dict):
                exc.detail.update(serializers.ValidationError(refused, code="unknown").detail)
            raise
        if refused:
            raise serializers.ValidationError(refused, code="unknown")
        return value
