"""The Celery app: configuration from Django settings (CELERY_*), tasks discovered in each app."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings.base")

app = Celery("kbplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
