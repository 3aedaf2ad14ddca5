"""`manage.py pair_reader_train [--rank 16] [--epochs 2] [--lr 3e-4] [--limit N]`: fit the pair reader of the bundled
model's shipped head on QQP's train split and write its adapters and the head file's `reader` block
(`conversations.training.pair_reader_training`)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from conversations.training.labelled_pairs import PAIRS
from conversations.training.pair_reader_training import reader_train


class Command(BaseCommand):
    help = "Fit the bundled head's pair reader on QQP's train split; report the held-out figures; write it."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--rank", type=int, default=16, help="the adapters' rank")
        parser.add_argument("--epochs", type=int, default=2)
        parser.add_argument("--lr", type=float, default=3e-4, help="the learning rate")
        parser.add_argument("--limit", type=int, default=0, help="fit on the first N pairs only (a smoke run)")

    def handle(self, *args: Any, **options: Any) -> None:
        for name in ("rank", "epochs"):
            if options[name] < 1:
                raise CommandError(f"--{name} must be at least 1")
        if not PAIRS.is_file():
            raise CommandError(f"No labelled pairs at {PAIRS}: the reader is fitted on QQP's pairs there.")
        reader_train(
            say=lambda line: self.stdout.write(line),
            rank=options["rank"],
            epochs=options["epochs"],
            lr=options["lr"],
            limit=options["limit"],
        )
