"""`manage.py traditional_chinese_reindex`: the name the release that first read Traditional Chinese as Simplified
gave its upgrade step, kept for the scripts that call it. It is `text_reading_reindex`, which finds that text and
every other the platform has since learned to read otherwise."""

from __future__ import annotations

from retrieval.management.commands import text_reading_reindex


class Command(text_reading_reindex.Command):
    help = f"The former name of text_reading_reindex. {text_reading_reindex.Command.help}"
