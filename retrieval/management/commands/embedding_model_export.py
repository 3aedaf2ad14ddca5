"""`manage.py embedding_model_export [--force]`: make the onnx backend's ONNX file of the configured model ahead of
time (at image build or deploy, or where EMBEDDING_ONNX_DIR is writable when web and workers mount it read-only), so
no process makes it on its first query. Made once per model identity; `--force` makes it again."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from retrieval import embeddings


class Command(BaseCommand):
    help = "Make the ONNX file the onnx embedding backend runs (EMBEDDING_ONNX_DIR), if it is not there yet."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="make it again even if it loads")

    def handle(self, *args, **options) -> None:  # noqa: ANN002, ANN003
        try:
            path = embeddings.onnx_file()
            if options["force"]:
                path.unlink(missing_ok=True)
            made = not path.is_file()
            embeddings.onnx_file_make()
        except (embeddings.EmbeddingModelUnavailable, OSError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{'Made' if made else 'Already there, and it loads:'} {path}")
