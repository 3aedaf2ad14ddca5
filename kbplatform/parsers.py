"""Request body parsers that turn every malformed body into a 400 with a message, never a 500 or mojibake.

- JSON: nesting is capped at `MAX_JSON_DEPTH` (no field of this API nests deeper than a few levels; a body of
  `[[[[...` would otherwise blow Python's recursion limit inside `json.load` or later in a serializer);
  invalid UTF-8 is named as such; NUL and lone surrogates, which PostgreSQL refuses, are refused here first.
- Both: bodies over DATA_UPLOAD_MAX_MEMORY_SIZE are a 413 (DRF reads them past Django's own check).
- Forms: invalid UTF-8 (raw or percent-encoded) is refused instead of being decoded with replacement
  characters and stored.
- Multipart: field names, values and file names that are not valid in the declared charset (UTF-8 unless one is
  declared) are refused (Django would decode them with replacement characters); file contents are bytes and go to
  the document parser untouched.
- JSON and multipart: a charset that names one of Python's bytes-to-bytes codecs (`rot13`, `base64`, `zlib`...) is
  a 415; decoding with it raised LookupError.
"""

from __future__ import annotations

import codecs
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import QueryDict
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import DataAndFiles, FormParser, JSONParser, MultiPartParser
from rest_framework.utils import json

MAX_JSON_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_body_problem(value: Any, depth_limit: int) -> str | None:
    """What makes a parsed body unstorable, or None: nesting deeper than `depth_limit`, or a string (value or
    key) holding NUL or a lone surrogate, which PostgreSQL cannot store in text or jsonb. Iterative, so it
    cannot recurse itself."""
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, str):
            if "\x00" in current:
                return "The JSON body contains a NUL character (\\u0000), which cannot be stored."
            if _SURROGATE.search(current):
                return "The JSON body contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text."
            continue
        if isinstance(current, dict):
            children = [*current.keys(), *current.values()]
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > depth_limit:
            return f"The JSON body nests deeper than {depth_limit} levels."
        stack.extend((child, depth + 1) for child in children)
    return None


def charset_is_bytes_codec(name: str) -> bool:
    """Whether `name` is a codec Python knows that does not turn bytes into text (`rot13`, `base64`, `zlib`...).
    `codecs.lookup` accepts those, so Django takes them as a request's encoding, and every decode with them raises
    LookupError. An unknown name is not one: Django ignores it and reads the default charset."""
    try:
        codecs.lookup(name)
    except LookupError:
        return False
    try:
        b"\x00".decode(name)  # not b"": Python returns "" for it without asking what the codec is
    except LookupError:
        return True
    except UnicodeError:
        pass
    return False


def _text_encoding(parser_context: dict | None, media_type: str | None, default: str) -> str:
    """The request's declared encoding, refused with 415 when it cannot decode text at all."""
    encoding = (parser_context or {}).get("encoding") or default
    if charset_is_bytes_codec(encoding):
        raise UnsupportedMediaType(
            media_type, detail=f'The charset "{encoding}" is not a text encoding; send the body in UTF-8.'
        )
    return encoding


def body_read_limited(stream: Any, parser_context: dict | None) -> bytes:
    """The whole body, refused with 413 beyond DATA_UPLOAD_MAX_MEMORY_SIZE. DRF reads JSON and form bodies from
    the raw stream, which Django does not size-check, so without this a client could make a worker hold any
    amount of memory. A declared Content-Length over the limit is refused before reading anything."""
    if stream is None:
        return b""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    request = (parser_context or {}).get("request")
    declared = request.META.get("CONTENT_LENGTH") if request is not None else None
    too_big = RequestDataTooBig(f"The request body is larger than {limit} bytes.")
    if limit is not None and declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    data = stream.read(limit + 1) if limit is not None else stream.read()
    if limit is not None and len(data) > limit:
        raise too_big
    return data


class SafeJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> object:
        encoding = _text_encoding(parser_context, media_type, "utf-8")
        body = body_read_limited(stream, parser_context)
        try:
            data = json.loads(body.decode(encoding), parse_constant=json.strict_constant)
        except UnicodeDecodeError as exc:
            raise ParseError(f"The request body is not valid {encoding.upper()}.") from exc
        except RecursionError as exc:
            raise ParseError(f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.") from exc
        except ValueError as exc:
            raise ParseError(f"The request body is not valid JSON: {exc}") from exc
        problem = json_body_problem(data, MAX_JSON_DEPTH)
        if problem:
            raise ParseError(problem)
        return data


class StrictFormParser(FormParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> QueryDict:
        body = body_read_limited(stream, parser_context)
        try:
            for pair in body.split(b"&"):
                unquote_to_bytes(pair.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError("The form body is not valid UTF-8.") from exc
        return QueryDict(body, encoding="utf-8")


# Django's multipart parser decodes with errors="replace" whatever the caller asks; a codec that is the declared
# one but ignores the errors argument makes it strict without copying the parser: "kb_strict_<codec>".
STRICT_PREFIX = "kb_strict_"


def _strict_search(name: str) -> codecs.CodecInfo | None:
    if not name.startswith(STRICT_PREFIX):
        return None
    try:
        base = codecs.lookup(name[len(STRICT_PREFIX) :])
    except LookupError:
        return None

    def decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
        return base.decode(data, "strict")

    return codecs.CodecInfo(
        name=name,
        encode=base.encode,
        decode=decode,
        incrementalencoder=base.incrementalencoder,
        incrementaldecoder=base.incrementaldecoder,
        streamreader=base.streamreader,
        streamwriter=base.streamwriter,
    )


codecs.register(_strict_search)


class StrictMultiPartParser(MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> DataAndFiles:
        parser_context = parser_context or {}
        request = parser_context["request"]
        declared = codecs.lookup(_text_encoding(parser_context, media_type, settings.DEFAULT_CHARSET)).name
        encoding = f"{STRICT_PREFIX}{declared}"
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        try:
            data, files = DjangoMultiPartParser(meta, stream, request.upload_handlers, encoding).parse()
        except MultiPartParserError as exc:
            raise ParseError(f"Multipart form parse error - {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"A field name, value or file name of the multipart body is not valid {declared.upper()}."
            ) from exc
        return DataAndFiles(data, files)
