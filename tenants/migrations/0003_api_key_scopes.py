"""API key roles become scopes (tenants.scopes). Every key keeps what it could do: an admin key gets chat, ingest and
admin; a standard key chat and ingest (it could converse, search and manage documents, never keys, the policy or
knowledge bases). Then the role column goes: nothing reads it any more. Backwards, a key with the admin scope is an
admin key again and every other key a standard one."""

from django.db import migrations, models


def roles_to_scopes(apps, schema_editor):
    api_key = apps.get_model("tenants", "ApiKey")
    api_key._base_manager.filter(role="admin").update(scope_chat=True, scope_ingest=True, scope_admin=True)
    api_key._base_manager.exclude(role="admin").update(scope_chat=True, scope_ingest=True, scope_admin=False)


def scopes_to_roles(apps, schema_editor):
    api_key = apps.get_model("tenants", "ApiKey")
    api_key._base_manager.filter(scope_admin=True).update(role="admin")
    api_key._base_manager.filter(scope_admin=False).update(role="standard")


class Migration(migrations.Migration):
    dependencies = [("tenants", "0002_tenant_settings_version")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="scope_chat",
            field=models.BooleanField(
                default=True,
                help_text="Conversations, messages, feedback, search; reading knowledge bases.",
                verbose_name="chat",
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="scope_ingest",
            field=models.BooleanField(
                default=False,
                help_text="Documents and chunks: add, list, edit, delete, re-index.",
                verbose_name="ingest",
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="scope_admin",
            field=models.BooleanField(
                default=False,
                help_text="Everything: API keys, the dedup policy, creating and deleting knowledge bases, the audit "
                "log with the policy's settings and its review.",
                verbose_name="admin",
            ),
        ),
        migrations.RunPython(roles_to_scopes, scopes_to_roles),
        migrations.RemoveField(model_name="apikey", name="role"),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.CheckConstraint(
                condition=models.Q(("scope_chat", True), ("scope_ingest", True), ("scope_admin", True), _connector="OR"),
                name="api_key_has_a_scope",
                violation_error_message="An API key needs at least one scope (chat, ingest or admin).",
            ),
        ),
    ]
