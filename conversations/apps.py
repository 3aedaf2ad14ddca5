from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        # The admin index with links to the playground, dashboard and settings pages (no model page leads there).
        admin.site.index_template = "admin/conversations/index.html"
