"""REST endpoints of a tenant's dedup policy, its audit log (the decisions and support's review of them) and the end
users' feedback on answers: thin views over services and selectors. Another tenant's event or turn is a 404."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors, services
from conversations.admin import services as admin_services
from conversations.models import (
    DedupAction,
    DedupScope,
    DuplicateLabel,
    FeedbackRating,
    Granularity,
    LabelSource,
    ReviewVerdict,
)
from kbplatform.serializers import MAX_OFFSET, StrictInputSerializer, id_field
from tenants.api import TenantApi
from tenants.permissions import IsTenantWideKeyForMethods
from tenants.scopes import Scope


class StrictFloatField(serializers.FloatField):
    """A number, not a boolean: DRF's FloatField takes `true` as 1.0, which set a threshold of 1.0 by accident."""

    def to_internal_value(self, data: object) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class IsTenantWideKeyForPolicy(IsTenantWideKeyForMethods):
    methods = frozenset({"PUT"})
    message = "This API key is limited to one knowledge base and cannot change the tenant's dedup policy."


class DedupPolicyApi(TenantApi):
    """The tenant's policy: keys with the admin scope read it; changing it, which applies to every knowledge base of
    the tenant, needs such a key of the whole tenant (a key limited to one knowledge base is a 403)."""

    required_scope = Scope.ADMIN
    extra_permission_classes = [IsTenantWideKeyForPolicy]

    class PolicySerializer(StrictInputSerializer):
        scope = serializers.ChoiceField(choices=DedupScope.choices)
        threshold = StrictFloatField()
        question_window = serializers.IntegerField()
        exclusion_enabled = serializers.BooleanField()
        exclusion_window = serializers.IntegerField()
        granularity = serializers.ChoiceField(choices=Granularity.choices)
        min_results = serializers.IntegerField()
        ttl_seconds = serializers.IntegerField()
        allowlisted_intents = serializers.ListField(child=serializers.CharField(max_length=64), allow_empty=True)
        shadow_mode = serializers.BooleanField()
        rewrite_followups = serializers.BooleanField(
            help_text="With an LLM configured, rewrite a follow-up into a standalone question before the duplicate "
            "check and the search (recorded on the turn and its audit event)."
        )

    @extend_schema(responses=PolicySerializer, summary="The tenant's dedup policy (admin scope)")
    def get(self, request: Request) -> Response:
        return Response(self.PolicySerializer(services.dedup_policy_get(tenant=self.tenant)).data)

    @extend_schema(
        request=PolicySerializer,
        responses=PolicySerializer,
        summary="Change the dedup policy (admin scope, a key of the whole tenant; send the fields to change, each is "
        "recorded)",
    )
    def put(self, request: Request) -> Response:
        data = self.PolicySerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        if not data.validated_data:
            raise serializers.ValidationError({"non_field_errors": ["Send at least one policy field to change."]})
        # Through the settings history, so a change made with an API key shows in the admin's audit view too.
        admin_services.dedup_policy_change(
            tenant=self.tenant, user=None, actor=f"API key {self.api_key.prefix}", changes=dict(data.validated_data)
        )
        return Response(self.PolicySerializer(services.dedup_policy_get(tenant=self.tenant)).data)


_POLICY_FIELD_HELP = (
    "Only for a key with the admin scope (left out for others): the policy's setting the decision was made under."
)


class AuditEventListApi(TenantApi):
    """The dedup audit log, for any key with the chat scope. The policy's settings each decision was made under
    (`scope`, `threshold`, `question_window`, `exclusion_window`, `granularity`) are in it only for a key with the
    admin scope: a chat key is the one a customer app embeds, and the tenant's tuning is not the app's to read."""

    required_scope = Scope.CHAT

    MAX_LIMIT = 500

    class FilterSerializer(StrictInputSerializer):
        action = serializers.ChoiceField(choices=DedupAction.choices, required=False)
        conversation = id_field(required=False)
        created_from = serializers.DateTimeField(required=False, help_text="Events created at or after this time.")
        created_to = serializers.DateTimeField(required=False, help_text="Events created before this time.")
        similarity_min = serializers.FloatField(required=False, min_value=-1, max_value=1)
        similarity_max = serializers.FloatField(required=False, min_value=-1, max_value=1)
        # allow_null: a BooleanField missing from a query string is otherwise read as false (HTML checkbox rules).
        suspected_false_hit = serializers.BooleanField(
            required=False,
            allow_null=True,
            help_text="true: only served stored answers the end user rated thumbs-down (for support to review); "
            "false: only the others.",
        )
        shadow = serializers.BooleanField(
            required=False,
            allow_null=True,
            help_text="true: only decisions shadow mode logged without applying them (a `served_cached` event whose "
            "answer was made fresh); false: only decisions applied.",
        )
        embedding_model = serializers.CharField(
            required=False,
            max_length=200,
            help_text="Only decisions made with this embedding model (a knowledge base's `embedding_model`): "
            "similarities of two models are on scales of their own.",
        )
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

        def validate(self, attrs: dict) -> dict:
            """A range that no event can fall in is the client's mistake (the two ends swapped), not an empty log."""
            created_from, created_to = attrs.get("created_from"), attrs.get("created_to")
            if created_from is not None and created_to is not None and created_to <= created_from:
                raise serializers.ValidationError(
                    {"created_to": ["Must be later than created_from (created_to is exclusive)."]}
                )
            similarity_min, similarity_max = attrs.get("similarity_min"), attrs.get("similarity_max")
            if similarity_min is not None and similarity_max is not None and similarity_max < similarity_min:
                raise serializers.ValidationError({"similarity_max": ["Must be at least similarity_min."]})
            return attrs

    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        created_at = serializers.DateTimeField()
        conversation = serializers.IntegerField(source="conversation_ref")
        turn = serializers.IntegerField(source="turn_ref", allow_null=True)
        action = serializers.CharField()
        intent = serializers.CharField()
        reason = serializers.CharField()
        similarity = serializers.FloatField(allow_null=True)
        matched_turn = serializers.IntegerField(source="matched_turn_ref", allow_null=True)
        curated_answer = serializers.IntegerField(
            source="curated_answer_ref",
            allow_null=True,
            help_text="The curated answer the decision was about (served, or its phrasing the nearest match refused).",
        )
        curated_question = serializers.CharField(help_text="That curated answer's phrasing matched (else empty).")
        pair_probability = serializers.FloatField(allow_null=True)
        match_passes_checks = serializers.BooleanField(allow_null=True)
        embedding_model = serializers.CharField(
            help_text="The embedding model (its knowledge base's) the question was embedded and decided with; its "
            "similarity and probability are of that model. Empty for events from before it was kept."
        )
        excluded_count = serializers.IntegerField()
        relaxed = serializers.BooleanField()
        shadow = serializers.BooleanField()
        tokens_saved = serializers.IntegerField()
        ms_saved = serializers.FloatField()
        review_verdict = serializers.CharField()
        suspected_false_hit = serializers.BooleanField(
            help_text="The end user rated the stored answer this turn served thumbs-down (POST "
            "/api/v1/turns/{id}/feedback/); cleared by a thumbs-up until the event is reviewed."
        )
        suspected_false_hit_at = serializers.DateTimeField(allow_null=True)

    class PolicyOutputSerializer(OutputSerializer):
        """An event with the policy's settings it was decided under: what a key with the admin scope reads. The
        thresholds, windows and scope are the tenant's tuning, which a key embedded in a customer app (chat) has no
        need of; what the event says of the decision itself (action, similarity, reason) it already had in the
        turn's response."""

        scope = serializers.CharField(required=False, help_text=_POLICY_FIELD_HELP)
        threshold = serializers.FloatField(required=False, help_text=_POLICY_FIELD_HELP)
        question_window = serializers.IntegerField(required=False, help_text=_POLICY_FIELD_HELP)
        exclusion_window = serializers.IntegerField(required=False, help_text=_POLICY_FIELD_HELP)
        granularity = serializers.CharField(required=False, help_text=_POLICY_FIELD_HELP)

    @extend_schema(
        parameters=[FilterSerializer],
        responses=inline_serializer(
            "AuditEventPage", {"count": serializers.IntegerField(), "results": PolicyOutputSerializer(many=True)}
        ),
        summary="The dedup audit log, newest first, one page (limit/offset)",
    )
    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = dict(filters.validated_data)
        limit, offset = params.pop("limit"), params.pop("offset")
        events = selectors.dedup_event_list(
            tenant=self.tenant,
            conversation_id=params.pop("conversation", None),
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
            **params,
        )
        page = list(events[offset : offset + limit])
        serializer = self.PolicyOutputSerializer if Scope.ADMIN in self.api_key.scopes else self.OutputSerializer
        return Response({"count": events.count(), "results": serializer(page, many=True).data})


class AuditEventReviewApi(TenantApi):
    """Support tooling's verdict on one dedup decision (admin scope), as the admin's review gives it: the event's
    verdict and note, and the support label the verdict says (docs/conversations.md, "Labels"): on a served stored
    answer, `correct` means the questions are duplicates; on a refused or missed match, `incorrect` means they are.
    A verdict that says nothing of the two questions (no stored question compared, or a match refused for its
    answer's sake) is recorded with no label (`label` null). Given again, the verdict and label are changed."""

    required_scope = Scope.ADMIN

    class InputSerializer(StrictInputSerializer):
        verdict = serializers.ChoiceField(choices=[ReviewVerdict.CORRECT, ReviewVerdict.INCORRECT])
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    class OutputSerializer(serializers.Serializer):
        class LabelSerializer(serializers.Serializer):
            id = serializers.IntegerField()
            is_duplicate = serializers.BooleanField()
            source = serializers.ChoiceField(choices=LabelSource.choices)
            given_by = serializers.CharField()

        id = serializers.IntegerField()
        action = serializers.CharField()
        review_verdict = serializers.CharField()
        review_note = serializers.CharField(allow_blank=True)
        reviewed_at = serializers.DateTimeField(allow_null=True)
        label = LabelSerializer(source="support_label", allow_null=True)

    @extend_schema(
        request=InputSerializer,
        responses=OutputSerializer,
        summary="Review a dedup decision (admin scope): the verdict, and the duplicate label it says",
    )
    def post(self, request: Request, event_id: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        event = selectors.dedup_event_get(
            tenant=self.tenant, event_id=event_id, allowed_knowledge_base_id=self.api_key.knowledge_base_id
        )
        admin_services.dedup_events_review(
            tenant=self.tenant,
            event_ids=[event.pk],
            user=None,
            actor=f"API key {self.api_key.prefix}",
            verdict=data.validated_data["verdict"],
            note=data.validated_data["note"],
        )
        event.refresh_from_db()
        event.support_label = (
            DuplicateLabel.objects.for_tenant(self.tenant).filter(dedup_event=event, source=LabelSource.SUPPORT).first()
        )
        return Response(self.OutputSerializer(event).data)


class FeedbackSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    turn = serializers.IntegerField(source="turn_id")
    conversation = serializers.IntegerField(source="conversation_id")
    rating = serializers.ChoiceField(choices=FeedbackRating.choices)
    comment = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class TurnFeedbackApi(TenantApi):
    """The end user's feedback on a turn's answer, one per turn: POST or PUT gives it or replaces it, GET reads it.
    A thumbs-down on a turn that was served a stored answer marks its audit event a suspected false hit."""

    required_scope = Scope.CHAT

    class InputSerializer(StrictInputSerializer):
        rating = serializers.ChoiceField(choices=FeedbackRating.choices)
        comment = serializers.CharField(
            max_length=services.COMMENT_MAX_CHARS, required=False, allow_blank=True, default=""
        )

    @extend_schema(
        responses={200: FeedbackSerializer, 404: OpenApiResponse(description="No such turn, or no feedback on it.")},
        summary="The feedback on a turn",
    )
    def get(self, request: Request, turn_id: int) -> Response:
        turn = selectors.turn_get(
            tenant=self.tenant, turn_id=turn_id, allowed_knowledge_base_id=self.api_key.knowledge_base_id
        )
        return Response(FeedbackSerializer(selectors.feedback_get(tenant=self.tenant, turn=turn)).data)

    def _set(self, request: Request, turn_id: int) -> Response:
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = services.feedback_set(
            tenant=self.tenant,
            turn_id=turn_id,
            rating=data.validated_data["rating"],
            comment=data.validated_data["comment"],
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        return Response(
            FeedbackSerializer(outcome.feedback).data,
            status=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK,
        )

    _SET_RESPONSES = {
        200: OpenApiResponse(FeedbackSerializer, description="The turn's feedback, replaced."),
        201: OpenApiResponse(FeedbackSerializer, description="The turn's feedback, given for the first time."),
        409: OpenApiResponse(description="The turn has no answer to rate yet (retrieve mode, no client answer)."),
    }

    @extend_schema(request=InputSerializer, responses=_SET_RESPONSES, summary="Rate a turn's answer")
    def post(self, request: Request, turn_id: int) -> Response:
        return self._set(request, turn_id)

    @extend_schema(request=InputSerializer, responses=_SET_RESPONSES, summary="Rate a turn's answer (replace)")
    def put(self, request: Request, turn_id: int) -> Response:
        return self._set(request, turn_id)


class FeedbackListApi(TenantApi):
    required_scope = Scope.CHAT

    class FilterSerializer(StrictInputSerializer):
        rating = serializers.ChoiceField(choices=FeedbackRating.choices, required=False)
        conversation = id_field(required=False)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=100)
        offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)

    @extend_schema(
        parameters=[FilterSerializer],
        responses=inline_serializer(
            "FeedbackPage",
            {
                "count": serializers.IntegerField(help_text="The feedback that matches the filters, on every page."),
                "results": FeedbackSerializer(many=True, help_text="Most recently given or changed first."),
            },
        ),
        summary="Feedback on answers, most recent first, one page (limit/offset)",
        operation_id="v1_feedback_list",
    )
    def get(self, request: Request) -> Response:
        """A key limited to one knowledge base lists the feedback on that one's conversations only."""
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        params = dict(filters.validated_data)
        limit, offset = params.pop("limit"), params.pop("offset")
        feedback = selectors.feedback_list(
            tenant=self.tenant,
            rating=params.get("rating"),
            conversation_id=params.get("conversation"),
            allowed_knowledge_base_id=self.api_key.knowledge_base_id,
        )
        page = list(feedback[offset : offset + limit])
        return Response({"count": feedback.count(), "results": FeedbackSerializer(page, many=True).data})
