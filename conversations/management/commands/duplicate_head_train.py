"""`manage.py duplicate_head_train [--model NAME] [--pairs PATH ...] [--out PATH] [--trees | --precision-target P
[--cut-on PATH ...]]`: fit the shipped duplicate head of an embedding model on labelled question pairs (QQP's by
default) and write its file (`duplicate_model.head_path(NAME)`; `conversations.training.duplicate_head_training`).

The bundled model's head, as shipped: `manage.py duplicate_head_train --trees`. The multilingual model's head, as
shipped (docs/conversations.md, "Where the head's weights come from"):

    manage.py duplicate_head_train --model use-multilingual-v3 --pairs ../shared/data/qqp/pairs.jsonl \\
        --pairs ../shared/data/zh/afqmc_train.jsonl --pairs ../shared/data/zh/lcqmc.jsonl \\
        --precision-target 0.87 --cut-on ../shared/data/zh/afqmc_train.jsonl --cut-on ../shared/data/zh/lcqmc.jsonl
"""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from conversations.dedup.duplicate_model import head_path
from conversations.training.duplicate_head_training import head_train
from conversations.training.labelled_pairs import PAIRS
from retrieval.embeddings import EmbeddingModelNotOffered, model_name


class Command(BaseCommand):
    help = "Train a duplicate head on labelled pairs' train split; report the held-out figures; write the model."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--pairs",
            action="append",
            help="a JSONL file of pair_id, question1, question2, is_duplicate; give it again for several files "
            "(default: QQP's pairs)",
        )
        parser.add_argument("--model", default=None, help="the embedding model whose vectors the head reads")
        parser.add_argument("--out", default=None, help="where the model goes (default: the model's shipped head)")
        parser.add_argument(
            "--precision-target",
            type=float,
            default=None,
            help="choose the penalty and cut for the most recall at this out-of-fold precision (at the default gate) "
            "instead of the best precision at the recall floor",
        )
        parser.add_argument(
            "--trees",
            action="store_true",
            help="boosted trees on the regression's log-odds and the pair's text features (recall-floor rule only)",
        )
        parser.add_argument(
            "--cut-on",
            action="append",
            default=[],
            help="with --precision-target: a file (one of --pairs) whose train pairs choose, in equal shares with the "
            "others named (default: every file)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        given = options["pairs"] or [str(PAIRS)]
        paths = [Path(p) for p in ([given] if isinstance(given, (str, Path)) else given)]  # call_command passes one
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise CommandError(f"No labelled pairs at {', '.join(missing)}: give --pairs a JSONL file.")
        cut_on = [Path(p) for p in ([options["cut_on"]] if isinstance(options["cut_on"], str) else options["cut_on"])]
        if options["trees"] and options["precision_target"] is not None:
            raise CommandError("--trees is chosen by the recall-floor rule: give no --precision-target with it.")
        if cut_on and options["precision_target"] is None:
            raise CommandError("--cut-on chooses for --precision-target: give both, or neither.")
        if {p.resolve() for p in cut_on} - {p.resolve() for p in paths}:
            raise CommandError("--cut-on names a file that is not one of --pairs.")
        try:
            name = model_name(options["model"])
        except EmbeddingModelNotOffered as exc:
            raise CommandError(exc.message) from exc
        out = Path(options["out"]) if options["out"] else head_path(name)
        try:
            head_train(
                pairs_paths=paths,
                out=out,
                say=self.stdout.write,
                model=name,
                precision_target=options["precision_target"],
                cut_on=cut_on,
                trees=options["trees"],
            )
        except (KeyError, ValueError) as exc:
            raise CommandError(
                f"{', '.join(map(str, paths))} is not a file of labelled pairs ({type(exc).__name__}: {exc})."
            ) from exc
