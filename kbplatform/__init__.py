"""kbplatform: multi-tenant knowledge bases with multi-turn RAG that does not repeat itself."""

from kbplatform.celery import app as celery_app

__all__ = ("celery_app",)
