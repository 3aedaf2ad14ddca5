"""`manage.py duplicate_head_train`: the head fitted on a labelled pairs file is one the decision can load, with the
choices and figures it was made with; bad input is a message, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from conversations.duplicate_model import pair_model_load

SUPPORT_PAIRS = Path(__file__).parent / "data" / "support_pairs.jsonl"


@pytest.fixture
def pairs_file(tmp_path: Path) -> Path:
    """The support-desk pairs four times over (each copy its own pair ids, so both splits hold every kind)."""
    rows = [json.loads(line) for line in SUPPORT_PAIRS.read_text().splitlines() if line.strip()]
    path = tmp_path / "pairs.jsonl"
    with path.open("w") as handle:
        for copy in range(4):
            for index, row in enumerate(rows):
                handle.write(json.dumps({**row, "pair_id": f"{copy}-{index}"}) + "\n")
    return path


def test_a_head_trained_on_labelled_pairs_is_one_the_decision_loads(pairs_file, tmp_path, capsys):
    out = tmp_path / "head.json"
    call_command("duplicate_head_train", pairs=str(pairs_file), out=str(out))
    printed = capsys.readouterr().out
    assert "chosen penalty" in printed and "HELD-OUT" in printed
    payload = json.loads(out.read_text())
    assert payload["train_pairs"] + payload["held_out_pairs"] == 4 * 55
    assert payload["data"] == str(pairs_file)
    assert set(payload["held_out"]) == {"precision", "recall", "hit_rate"}
    model = pair_model_load(out)
    assert len(model.weights) == len(payload["weights"]) and 0.70 <= payload["threshold"] <= 0.90


def test_a_missing_or_unreadable_pairs_file_is_a_message(tmp_path):
    with pytest.raises(CommandError, match="No labelled pairs"):
        call_command("duplicate_head_train", pairs=str(tmp_path / "nowhere.jsonl"), out=str(tmp_path / "head.json"))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"question": "only one side"}\n')
    with pytest.raises(CommandError, match="not a file of labelled pairs"):
        call_command("duplicate_head_train", pairs=str(wrong), out=str(tmp_path / "head.json"))
    assert not (tmp_path / "head.json").exists()
