"""`manage.py duplicate_head_train [--pairs PATH] [--out PATH]`: fit the duplicate head on labelled question pairs
(QQP's by default) and write conversations/duplicate_model.json (`conversations.duplicate_head_training`)."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from conversations.duplicate_head_training import head_train
from conversations.duplicate_model import MODEL_PATH
from conversations.labelled_pairs import PAIRS


class Command(BaseCommand):
    help = "Train the duplicate head on labelled pairs' train split; report the held-out figures; write the model."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--pairs", default=str(PAIRS), help="a JSONL file of pair_id, question1, question2, is_duplicate"
        )
        parser.add_argument("--out", default=str(MODEL_PATH), help="where the model goes")

    def handle(self, *args: Any, **options: Any) -> None:
        pairs = Path(options["pairs"])
        if not pairs.is_file():
            raise CommandError(f"No labelled pairs at {pairs}: give --pairs a JSONL file.")
        try:
            head_train(pairs_path=pairs, out=Path(options["out"]), say=self.stdout.write)
        except (KeyError, ValueError) as exc:
            raise CommandError(f"{pairs} is not a file of labelled pairs ({type(exc).__name__}: {exc}).") from exc
