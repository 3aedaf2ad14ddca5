"""`manage.py duplicate_model_train --tenant SLUG [--pairs FILE] [--model NAME]`: train a version of the tenant's
duplicate verifier in the foreground (from its reviews, or from a labelled pairs file; in the space of one embedding
model), with a progress bar; exits once it is trained and its activation decided, printing the held-out figures
(`conversations.training.verifiers`)."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from conversations.models import DuplicateModelStatus
from conversations.training.labelled_pairs import labelled_pairs_read
from conversations.training.verifiers import (
    duplicate_model_train,
    duplicate_model_version_create,
    verifier_embedding_model,
)
from retrieval.embeddings import offered_models
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Train the tenant's duplicate verifier; activate it only if it beats the active decision on held-out labels."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument(
            "--pairs", default="", help="a JSONL file of pair_id, question1, question2, is_duplicate (default: reviews)"
        )
        parser.add_argument(
            "--model",
            default="",
            help="the embedding model to learn in (default: the one all the tenant's knowledge bases use, else the "
            "deployment's default)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant with slug {options['tenant']!r}.")
        if options["model"] and options["model"] not in offered_models():
            raise CommandError(f"No embedding model {options['model']!r}: offered are {', '.join(offered_models())}.")
        pairs, source = None, "reviews"
        if options["pairs"]:
            path = Path(options["pairs"])
            if not path.is_file():
                raise CommandError(f"No labelled pairs at {path}: give --pairs a JSONL file.")
            try:
                pairs = labelled_pairs_read(path)
            except (KeyError, ValueError, TypeError) as exc:
                raise CommandError(f"{path} is not a file of labelled pairs ({type(exc).__name__}: {exc}).") from exc
            source = str(path)
        model = options["model"] or verifier_embedding_model(tenant=tenant)
        row = duplicate_model_version_create(tenant=tenant, embedding_model=model, source=source)
        with tqdm(total=100, desc=f"v{row.version} of {model}", unit="%", file=self.stderr._out) as bar:

            def progress(fraction: float, stage: str) -> None:
                bar.set_postfix_str(stage[:60])
                bar.update(max(0, round(fraction * 100) - bar.n))

            row = duplicate_model_train(
                tenant=tenant,
                version_id=row.pk,
                pairs=pairs,
                progress=progress,
            )
        if row.status == DuplicateModelStatus.FAILED:
            raise CommandError(f"v{row.version} not trained: {row.error}")
        self.stdout.write(
            f"v{row.version} of {row.embedding_model}: {row.status} ({row.label_count} labels); {row.decision_note}"
        )
        self.stdout.write(json.dumps(row.figures, indent=1))
