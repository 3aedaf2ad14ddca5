from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0014_conversation_metadata_filter'),
    ]

    operations = [
        migrations.AddField(
            model_name='dedupevent',
            name='rewritten_question',
            field=models.TextField(blank=True, db_default='', default='', help_text='The standalone question the follow-up was rewritten into.'),
        ),
        migrations.AddField(
            model_name='deduppolicy',
            name='rewrite_followups',
            field=models.BooleanField(db_default=False, default=False, help_text='With an LLM configured: rewrite a follow-up into a standalone question before the duplicate check and the search.'),
        ),
        migrations.AddField(
            model_name='turn',
            name='answer_error',
            field=models.CharField(blank=True, db_default='', default='', max_length=300),
        ),
        migrations.AddField(
            model_name='turn',
            name='answer_partial',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
        migrations.AddField(
            model_name='turn',
            name='answer_state',
            field=models.CharField(choices=[('complete', 'Complete'), ('interrupted', 'Stream cut: the client went away before the answer was complete'), ('failed', 'The answer service failed while the answer was streamed')], db_default='complete', default='complete', max_length=12),
        ),
        migrations.AddField(
            model_name='turn',
            name='rewritten_question',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
    ]
