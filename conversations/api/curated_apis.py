"""Curated answers over the REST API: list and create them in a knowledge base, read, edit, disable and delete one,
import many from a CSV, XLSX or JSON Lines file (answered per row, as the document bulk upload answers per
document). The `ingest` scope: curated answers are a knowledge base's content, as its documents are. A key limited to
one knowledge base reaches that one's curated answers only; another tenant's are a 404."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from conversations.curated import curated as curated_services
from conversations.curated.curated_import import (
    ANSWER_MAX_CHARS,
    IMPORT_FORMATS,
    PHRASING_MAX_CHARS,
    PHRASINGS_MAX,
    curated_input_check,
    curated_rows_read,
    import_format_of,
)
from conversations.models import CuratedAnswer
from conversations.selectors import curated_answer_get, curated_answers_list
from kbplatform.errors import ApplicationError, NotFoundError
from kbplatform.serializers import MAX_OFFSET, StrictInputSerializer, id_field
from retrieval.models import KnowledgeBase
from retrieval.selectors import knowledge_base_get
from tenants.api import TenantApi
from tenants.scopes import Scope


class CuratedAnswerOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    knowledge_base = serializers.IntegerField(source="knowledge_base_id")
    answer = serializers.CharField()
    questions = serializers.SerializerMethodField(help_text="Its phrasings, in the order they were given.")
    enabled = serializers.BooleanField()
    external_id = serializers.CharField(allow_null=True)
    source_chunk_ids = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The chunks it cites. A cited chunk changed since it was cited (re-indexed, edited, disabled, "
        "deleted) keeps it from being served until it is cited again (PATCH source_chunk_ids).",
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def get_questions(self, curated_answer: CuratedAnswer) -> list[str]:
        return [phrasing.question for phrasing in curated_answer.phrasings.all()]


def _error_body(error: ApplicationError) -> dict:
    return {"message": error.message, "extra": error.extra}


class _CuratedApi(TenantApi):
    required_scope = Scope.INGEST

    def knowledge_base_or_404(self, knowledge_base_id: int) -> KnowledgeBase:
        knowledge_base = knowledge_base_get(
            tenant=self.tenant, knowledge_base_id=knowledge_base_id, only_id=self.api_key.knowledge_base_id
        )
        if knowledge_base is None:
            raise NotFoundError("Knowledge base not found.")
        return knowledge_base

    def curated_answer_or_404(self, curated_answer_id: int) -> CuratedAnswer:
        curated_answer = curated_answer_get(
            tenant=self.tenant,
            curated_answer_id=curated_answer_id,
            only_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        if curated_answer is None:
            raise NotFoundError("Curated answer not found.")
        return curated_answer


class CuratedAnswerListCreateApi(_CuratedApi):
    """GET lists a knowledge base's curated answers (oldest first); POST adds one, served from the next turn on."""

    class FilterSerializer(StrictInputSerializer):
        enabled = serializers.BooleanField(required=False, allow_null=True, default=None)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

    class InputSerializer(StrictInputSerializer):
        answer = serializers.CharField(max_length=ANSWER_MAX_CHARS, trim_whitespace=False)
        questions = serializers.ListField(
            child=serializers.CharField(max_length=PHRASING_MAX_CHARS, trim_whitespace=False),
            min_length=1,
            max_length=PHRASINGS_MAX,
            help_text="Its phrasings: the questions it answers, in any words; each is embedded with the knowledge "
            "base's model.",
        )
        enabled = serializers.BooleanField(required=False, default=True)
        external_id = serializers.CharField(required=False, allow_null=True, max_length=255, default=None)
        source_chunk_ids = serializers.ListField(
            child=id_field(), required=False, default=list, help_text="Chunks it cites."
        )

    @extend_schema(
        parameters=[FilterSerializer],
        responses={
            200: inline_serializer(
                "CuratedAnswerPage",
                {
                    "count": serializers.IntegerField(),
                    "results": CuratedAnswerOutputSerializer(many=True),
                },
            )
        },
        summary="List a knowledge base's curated answers",
    )
    def get(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        count, page = curated_answers_list(tenant=self.tenant, knowledge_base=knowledge_base, **filters.validated_data)
        return Response({"count": count, "results": CuratedAnswerOutputSerializer(page, many=True).data})

    @extend_schema(
        request=InputSerializer,
        responses={
            201: CuratedAnswerOutputSerializer,
            409: OpenApiResponse(description="The knowledge base already has a curated answer with this external_id."),
        },
        summary="Add a curated answer",
    )
    def post(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        curated_answer = curated_services.curated_answer_create(
            tenant=self.tenant, knowledge_base=knowledge_base, curated=curated_input_check(**data.validated_data)
        )
        return Response(CuratedAnswerOutputSerializer(curated_answer).data, status=status.HTTP_201_CREATED)


class CuratedAnswerDetailApi(_CuratedApi):
    """GET reads one; PATCH changes what it names (questions given replace them all), `enabled: false` disables it;
    DELETE deletes it. Every change takes effect on the next turn."""

    class InputSerializer(StrictInputSerializer):
        answer = serializers.CharField(max_length=ANSWER_MAX_CHARS, required=False, trim_whitespace=False)
        questions = serializers.ListField(
            child=serializers.CharField(max_length=PHRASING_MAX_CHARS, trim_whitespace=False),
            min_length=1,
            max_length=PHRASINGS_MAX,
            required=False,
        )
        enabled = serializers.BooleanField(required=False)
        source_chunk_ids = serializers.ListField(child=id_field(), required=False)

    @extend_schema(responses={200: CuratedAnswerOutputSerializer}, summary="Read a curated answer")
    def get(self, request: Request, curated_answer_id: int) -> Response:
        return Response(CuratedAnswerOutputSerializer(self.curated_answer_or_404(curated_answer_id)).data)

    @extend_schema(
        request=InputSerializer,
        responses={200: CuratedAnswerOutputSerializer},
        summary="Edit or disable a curated answer",
    )
    def patch(self, request: Request, curated_answer_id: int) -> Response:
        curated_answer = self.curated_answer_or_404(curated_answer_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        given = data.validated_data
        # The same checks as a new one's, on what it will hold.
        checked = curated_input_check(
            answer=given.get("answer", curated_answer.answer),
            questions=given.get("questions", [phrasing.question for phrasing in curated_answer.phrasings.all()]),
            enabled=given.get("enabled", curated_answer.enabled),
            source_chunk_ids=given.get("source_chunk_ids"),
        )
        curated_answer = curated_services.curated_answer_update(
            tenant=self.tenant,
            curated_answer=curated_answer,
            answer=checked.answer if "answer" in given else None,
            questions=checked.questions if "questions" in given else None,
            enabled=given.get("enabled"),
            source_chunk_ids=checked.source_chunk_ids if "source_chunk_ids" in given else None,
        )
        return Response(CuratedAnswerOutputSerializer(self.curated_answer_or_404(curated_answer.pk)).data)

    @extend_schema(responses={204: None}, summary="Delete a curated answer")
    def delete(self, request: Request, curated_answer_id: int) -> Response:
        curated_services.curated_answer_delete(
            tenant=self.tenant, curated_answer=self.curated_answer_or_404(curated_answer_id)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class CuratedAnswerImportApi(_CuratedApi):
    """Many curated answers from one file, answered per row: the good rows are stored, each bad row is reported in its
    place with its error and costs nothing else. A file that cannot be read at all is a 400 and stores nothing."""

    class InputSerializer(StrictInputSerializer):
        file = serializers.FileField(
            help_text="CSV or XLSX (first row: answer; question, question_2...; optionally enabled, external_id, "
            "source_chunk_ids; a question cell may hold several phrasings, one a line) or JSON Lines (one "
            '{"answer", "questions": [...], "enabled"?, "external_id"?, "source_chunk_ids"?} a line).'
        )
        format = serializers.ChoiceField(
            choices=list(IMPORT_FORMATS), required=False, help_text="Else taken from the file name's extension."
        )

    class ResultSerializer(serializers.Serializer):
        index = serializers.IntegerField(
            help_text="The row's place among the file's rows, from 0 (blank rows skipped)."
        )
        row = serializers.IntegerField(
            help_text="The row's number in the file: the data row (CSV, XLSX) or line, from 1."
        )
        status = serializers.IntegerField(
            help_text="201 stored; otherwise what POST would have answered for it (400, 409)."
        )
        curated_answer = CuratedAnswerOutputSerializer(allow_null=True)
        error = inline_serializer(
            "CuratedAnswerImportError",
            {"message": serializers.CharField(), "extra": serializers.DictField()},
            allow_null=True,
        )

    @extend_schema(
        request={"multipart/form-data": InputSerializer},
        responses={
            201: inline_serializer(
                "CuratedAnswerImportResponse",
                {
                    "created": serializers.IntegerField(help_text="Curated answers stored."),
                    "failed": serializers.IntegerField(help_text="Rows refused (see their results)."),
                    "results": ResultSerializer(many=True, help_text="One per row, in the file's order."),
                },
            ),
            400: OpenApiResponse(description="The file cannot be read as its format, or names no answer/question."),
            413: OpenApiResponse(description="The file is larger than KB_BULK_BODY_MAX_BYTES."),
        },
        summary="Import curated answers from a CSV, XLSX or JSON Lines file",
    )
    def post(self, request: Request, knowledge_base_id: int) -> Response:
        knowledge_base = self.knowledge_base_or_404(knowledge_base_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        if upload.size > settings.BULK_BODY_MAX_BYTES:
            raise ApplicationError(
                f"The file is {upload.size} bytes; an import is at most {settings.BULK_BODY_MAX_BYTES} bytes "
                "(KB_BULK_BODY_MAX_BYTES). Split it.",
                status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        file_format = import_format_of(file_name=upload.name or "", declared=data.validated_data.get("format"))
        rows = curated_rows_read(content=upload.read(), file_format=file_format)
        outcomes = curated_services.curated_answers_import(tenant=self.tenant, knowledge_base=knowledge_base, rows=rows)
        results = []
        for index, (row, outcome) in enumerate(zip(rows, outcomes, strict=True)):
            number = row.extra.get("row", index + 1) if isinstance(row, ApplicationError) else row.row
            if isinstance(outcome, ApplicationError):
                results.append(
                    {
                        "index": index,
                        "row": number,
                        "status": outcome.status_code,
                        "curated_answer": None,
                        "error": _error_body(outcome),
                    }
                )
            else:
                results.append(
                    {
                        "index": index,
                        "row": number,
                        "status": 201,
                        "curated_answer": CuratedAnswerOutputSerializer(outcome).data,
                        "error": None,
                    }
                )
        created = sum(1 for result in results if result["status"] == 201)
        return Response(
            {"created": created, "failed": len(results) - created, "results": results}, status=status.HTTP_201_CREATED
        )
