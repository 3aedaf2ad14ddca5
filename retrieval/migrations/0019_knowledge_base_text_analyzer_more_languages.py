"""Danish, Norwegian, Finnish, Hungarian, Romanian, Czech, Catalan and Serbian as a knowledge base's text analyser:
each writes the `english` BM25 field, its words read as stems of that language (`kbplatform.stems`). Choices only: no
column or row changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0018_knowledge_base_text_analyzer_languages"),
    ]

    operations = [
        migrations.AlterField(
            model_name="knowledgebase",
            name="text_analyzer",
            field=models.CharField(
                choices=[
                    ("english", "English"),
                    ("chinese", "Chinese (jieba)"),
                    ("spanish", "Spanish"),
                    ("french", "French"),
                    ("german", "German"),
                    ("portuguese", "Portuguese"),
                    ("italian", "Italian"),
                    ("dutch", "Dutch"),
                    ("turkish", "Turkish"),
                    ("polish", "Polish"),
                    ("indonesian", "Indonesian"),
                    ("swedish", "Swedish"),
                    ("danish", "Danish"),
                    ("norwegian", "Norwegian"),
                    ("finnish", "Finnish"),
                    ("hungarian", "Hungarian"),
                    ("romanian", "Romanian"),
                    ("czech", "Czech"),
                    ("catalan", "Catalan"),
                    ("serbian", "Serbian"),
                ],
                db_default="english",
                default="english",
                max_length=10,
            ),
        ),
    ]
