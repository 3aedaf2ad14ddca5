"""Curated Q&A pairs read from an import file (CSV, XLSX or JSON Lines) and checked row by row, with no database.

A file that cannot be read as its kind at all (JSON Lines not in UTF-8, a CSV in no encoding the document upload
reads, not a workbook, no `answer` or `question` column) is one ApplicationError (400) for the whole request; anything
wrong with one row is that row's ApplicationError, in its place, so the other rows are kept
(`conversations.curated.curated.curated_answers_import`).

Columns (CSV and XLSX, the first row names them, case and spaces ignored): `answer`; one or more starting with
`question` (`question`, `question_2`, `questions`...), each cell holding one phrasing or several, one a line;
optionally `enabled` (true/false, yes/no, 1/0; empty is true), `external_id` and `source_chunk_ids` (chunk ids,
separated by commas or spaces). JSON Lines: one object a line, `{"answer", "questions": [...], "enabled"?,
"external_id"?, "source_chunk_ids"?}` (`question`, one string, is taken too).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import zipfile
from dataclasses import dataclass, field, replace
from typing import Any

from kbplatform.errors import ApplicationError
from kbplatform.serializers import ID_MAX
from kbplatform.text import control_character_problem, has_visible_character
from kbplatform.text_encoding import UnreadableTextError, text_decode

ANSWER_MAX_CHARS = 20000
PHRASING_MAX_CHARS = 4000  # as a turn's question (`services.turns.QUESTION_MAX_CHARS`)
PHRASINGS_MAX = 50
EXTERNAL_ID_MAX_CHARS = 255
SOURCES_MAX = 20
IMPORT_FORMATS = ("csv", "xlsx", "jsonl")
_TRUE = {"", "true", "yes", "y", "1", "on"}
_FALSE = {"false", "no", "n", "0", "off"}


@dataclass(frozen=True)
class CuratedInput:
    """One curated answer as a client sends it, checked (`curated_input_check`)."""

    answer: str
    questions: list[str]
    enabled: bool = True
    external_id: str | None = None
    source_chunk_ids: list[int] = field(default_factory=list)
    row: int = 0  # its number in an import file (from 1), 0 when it came alone


def _row_error(message: str, **fields: list[str]) -> ApplicationError:
    return ApplicationError(message, extra={"fields": fields} if fields else None)


def _text_problem(value: str, *, max_chars: int) -> str | None:
    if len(value) > max_chars:
        return f"Longer than {max_chars} characters."
    problem = control_character_problem(value)
    if problem is None and not has_visible_character(value):
        problem = "Has nothing visible."
    return problem


def curated_input_check(
    *,
    answer: Any,
    questions: Any,
    enabled: Any = True,
    external_id: Any = None,
    source_chunk_ids: Any = None,
) -> CuratedInput:
    """The curated answer these values describe, trimmed, or an ApplicationError naming each field at fault. Phrasings
    are kept once each, in their order."""
    errors: dict[str, list[str]] = {}
    answer_text = answer.strip() if isinstance(answer, str) else ""
    if not answer_text:
        errors["answer"] = ["Required: the answer text."]
    elif problem := _text_problem(answer_text, max_chars=ANSWER_MAX_CHARS):
        errors["answer"] = [problem]
    if isinstance(questions, str):
        questions = [questions]
    phrasings: list[str] = []
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        errors["questions"] = ["A list of strings."]
    else:
        for question in questions:
            question = question.strip()
            if question and question not in phrasings:
                phrasings.append(question)
        problems = [p for q in phrasings if (p := _text_problem(q, max_chars=PHRASING_MAX_CHARS))]
        if not phrasings:
            errors["questions"] = ["At least one question (phrasing) is required."]
        elif len(phrasings) > PHRASINGS_MAX:
            errors["questions"] = [f"At most {PHRASINGS_MAX} phrasings an answer."]
        elif problems:
            errors["questions"] = problems[:1]
    if isinstance(enabled, str):
        word = enabled.strip().lower()
        enabled = True if word in _TRUE else False if word in _FALSE else None
    if enabled is None or not isinstance(enabled, bool):
        errors["enabled"] = ["true or false."]
    if external_id is not None and not isinstance(external_id, str):
        external_id = str(external_id) if isinstance(external_id, int) else None
        if external_id is None:
            errors["external_id"] = ["A string."]
    external_id = (external_id or "").strip() or None
    if external_id is not None and len(external_id) > EXTERNAL_ID_MAX_CHARS:
        errors["external_id"] = [f"At most {EXTERNAL_ID_MAX_CHARS} characters."]
    elif external_id is not None and (problem := control_character_problem(external_id)):
        errors["external_id"] = [problem]
    chunk_ids = _chunk_ids_of(source_chunk_ids)
    if chunk_ids is None:
        errors["source_chunk_ids"] = ["Chunk ids: whole numbers (a list, or separated by commas or spaces)."]
    elif len(chunk_ids) > SOURCES_MAX:
        errors["source_chunk_ids"] = [f"At most {SOURCES_MAX} cited chunks."]
    if errors:
        raise _row_error(f"Not a valid curated answer: {', '.join(sorted(errors))}.", **errors)
    return CuratedInput(
        answer=answer_text,
        questions=phrasings,
        enabled=enabled,
        external_id=external_id,
        source_chunk_ids=chunk_ids or [],
    )


def _chunk_ids_of(value: Any) -> list[int] | None:
    if value is None or value == "":
        return []
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return [int(value)] if math.isfinite(value) and float(value).is_integer() and 0 < value <= ID_MAX else None
    parts = [str(part).strip() for part in value] if isinstance(value, list) else re.split(r"[,\s]+", str(value))
    ids: list[int] = []
    for part in parts:
        if not part:
            continue
        # ASCII digits only: str.isdigit() also takes "²" and "①", which int() refuses.
        if not (part.isascii() and part.isdigit()) or not 1 <= int(part) <= ID_MAX:
            return None
        if int(part) not in ids:
            ids.append(int(part))
    return ids


def import_format_of(*, file_name: str, declared: str | None) -> str:
    """The file's format: `declared` when given, else from the name's extension; a 400 when neither says one."""
    kind = (declared or (file_name.rsplit(".", 1)[-1] if "." in file_name else "")).lower()
    kind = {"jsonlines": "jsonl", "ndjson": "jsonl"}.get(kind, kind)
    if kind not in IMPORT_FORMATS:
        raise ApplicationError(
            f"Cannot tell the file's format from {file_name!r}: name it .csv, .xlsx or .jsonl, or send `format`.",
            extra={"fields": {"format": [f"One of {', '.join(IMPORT_FORMATS)}."]}},
        )
    return kind


def curated_rows_read(*, content: bytes, file_format: str) -> list[CuratedInput | ApplicationError]:
    """Every row of the file, each a CuratedInput or its own error (the row's number in the file, from 1 for the first
    data line, in `extra.row`); blank rows are skipped. Raises ApplicationError for a file that cannot be read."""
    if file_format == "jsonl":
        rows = _jsonl_rows(content)
    else:
        table = _csv_table(content) if file_format == "csv" else _xlsx_table(content)
        rows = _table_rows(table)
    if not rows:
        raise ApplicationError("The file holds no curated answer: send at least one row.")
    return rows


def _jsonl_rows(content: bytes) -> list[CuratedInput | ApplicationError]:
    text = _utf8(content)
    rows: list[CuratedInput | ApplicationError] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            rows.append(_with_row(ApplicationError(f"Line {number} is not JSON: {exc}."), number))
            continue
        except RecursionError:
            rows.append(_with_row(ApplicationError(f"Line {number} nests too deeply to read as JSON."), number))
            continue
        if not isinstance(item, dict):
            rows.append(_with_row(ApplicationError(f"Line {number} is not a JSON object."), number))
            continue
        unknown = sorted(set(item) - {"answer", "questions", "question", "enabled", "external_id", "source_chunk_ids"})
        if unknown:
            error = _row_error(
                f"Unknown field: {', '.join(unknown)}.", **{name: ["Unknown field."] for name in unknown}
            )
            rows.append(_with_row(error, number))
            continue
        rows.append(
            _checked(
                number,
                answer=item.get("answer"),
                questions=item.get("questions", item.get("question")),
                enabled=item.get("enabled", True),
                external_id=item.get("external_id"),
                source_chunk_ids=item.get("source_chunk_ids"),
            )
        )
    return rows


def _utf8(content: bytes) -> str:
    try:
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ApplicationError(f"The file is not UTF-8 text (byte {exc.start}): save it as UTF-8.") from exc


def _csv_text(content: bytes) -> str:
    """A CSV file's text in the encoding it was saved in, read as an uploaded document's is (`text_decode`):
    Excel saves "CSV" in the system's code page (GBK on a Chinese Windows, Windows-1252 on a Western one), and the
    people who keep a help centre's FAQ in a workbook are not asked to know that. JSON Lines stays UTF-8, as JSON
    is."""
    try:
        return text_decode(content)
    except UnreadableTextError as exc:
        raise ApplicationError(str(exc)) from exc


def _csv_table(content: bytes) -> list[list[Any]]:
    text = _csv_text(content)
    try:
        return [row for row in csv.reader(io.StringIO(text, newline=""))]
    except csv.Error as exc:
        raise ApplicationError(f"The file is not valid CSV: {exc}.") from exc


def _xlsx_table(content: bytes) -> list[list[Any]]:
    import openpyxl

    try:
        workbook = openpyxl.load_workbook(io.BytesIO(content), read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise ApplicationError("The file is not an XLSX workbook (Excel 2010 or later): save it as .xlsx.") from exc
    try:
        sheet = workbook.worksheets[0] if workbook.worksheets else None
        if sheet is None:
            raise ApplicationError("The workbook has no sheet.")
        return [list(row) for row in sheet.iter_rows(values_only=True)]
    finally:
        workbook.close()


def _header_name(value: Any) -> str:
    return re.sub(r"[\s-]+", "_", str(value or "").strip().lower())


def _table_rows(table: list[list[Any]]) -> list[CuratedInput | ApplicationError]:
    """The rows of a CSV or XLSX table whose first row names the columns."""
    if not table:
        raise ApplicationError("The file is empty: its first row names the columns (answer, question...).")
    header = [_header_name(cell) for cell in table[0]]
    question_columns = [i for i, name in enumerate(header) if name.startswith("question")]
    known = {"answer", "enabled", "external_id", "source_chunk_ids"}
    missing = [name for name, there in (("answer", "answer" in header), ("question", question_columns)) if not there]
    if missing:
        raise ApplicationError(
            f"The first row names no {' and no '.join(missing)} column: it names the columns "
            "(answer; question, question_2...; optionally enabled, external_id, source_chunk_ids).",
            extra={"columns": [name for name in header if name]},
        )
    unknown = sorted({name for name in header if name and name not in known and not name.startswith("question")})
    if unknown:
        raise ApplicationError(f"Unknown column: {', '.join(unknown)}.", extra={"columns": unknown})
    column = {name: header.index(name) for name in known if name in header}
    rows: list[CuratedInput | ApplicationError] = []
    for number, row in enumerate(table[1:], start=1):
        cells = ["" if cell is None else cell for cell in row]
        if not any(str(cell).strip() for cell in cells):
            continue

        def cell(name: str, cells: list[Any] = cells) -> Any:
            index = column.get(name)
            return cells[index] if index is not None and index < len(cells) else None

        questions = [
            line
            for index in question_columns
            if index < len(cells)
            for line in str(cells[index]).splitlines()
            if line.strip()
        ]
        answer = cell("answer")
        enabled = cell("enabled")
        rows.append(
            _checked(
                number,
                answer=str(answer) if answer is not None else None,
                questions=questions,
                enabled=True if enabled in (None, "") else enabled if isinstance(enabled, bool) else str(enabled),
                external_id=cell("external_id"),
                source_chunk_ids=cell("source_chunk_ids"),
            )
        )
    return rows


def _with_row(error: ApplicationError, number: int) -> ApplicationError:
    error.extra = {**error.extra, "row": number}
    return error


def _checked(number: int, **values: Any) -> CuratedInput | ApplicationError:
    try:
        return replace(curated_input_check(**values), row=number)
    except ApplicationError as error:
        error.message = f"Row {number}: {error.message}"
        return _with_row(error, number)
