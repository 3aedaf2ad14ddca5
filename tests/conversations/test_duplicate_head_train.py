"""`manage.py duplicate_head_train`: the head fitted on a labelled pairs file is one the decision can load, with the
choices and figures it was made with; bad input is a message, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from conversations.dedup.duplicate_model import TREES_KIND, pair_model_load
from conversations.dedup.pair_features import FEATURE_VERSION, ORDER_FEATURE_VERSION, pair_feature_count
from conversations.models import DEFAULT_THRESHOLD
from conversations.training.duplicate_head_training import _data_label
from conversations.training.labelled_pairs import PAIRS, file_label_of, pairs_load

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


def test_a_tree_head_takes_the_regressions_gate_and_keeps_a_reader_only_beside_its_own_regression(
    pairs_file, tmp_path, capsys
):
    out = tmp_path / "head.json"
    call_command("duplicate_head_train", pairs=str(pairs_file), out=str(out), trees=True)
    printed = capsys.readouterr().out
    assert "the tree head on the regression's out-of-fold log-odds" in printed and "HELD-OUT" in printed
    payload = json.loads(out.read_text())
    model = pair_model_load(out)
    assert payload["kind_of_head"] == TREES_KIND and model.trees is not None
    assert model.feature_version == ORDER_FEATURE_VERSION and payload["linear_feature_version"] == FEATURE_VERSION
    assert len(model.weights) == pair_feature_count(model.dimension)
    # Only the cut is the trees': the gate is the one the regression chose, which policies' thresholds default to.
    assert payload["threshold"] == payload["regression"]["threshold"]
    assert set(payload["regression"]["train_out_of_fold"]) == {"precision", "recall", "hit_rate"}

    # A reader block is fitted beside one regression: kept when a retraining gives the same one, dropped otherwise.
    block = {"cut": 0.5, "weights": [1.0, 1.0]}
    out.write_text(json.dumps({**payload, "reader": block}))
    call_command("duplicate_head_train", pairs=str(pairs_file), out=str(out), trees=True)
    assert json.loads(out.read_text())["reader"] == block and "pair reader block kept" in capsys.readouterr().out
    out.write_text(json.dumps({**payload, "bias": payload["bias"] + 0.01, "reader": block}))
    call_command("duplicate_head_train", pairs=str(pairs_file), out=str(out), trees=True)
    assert "reader" not in json.loads(out.read_text())
    assert "run manage.py pair_reader_train again" in capsys.readouterr().out

    with pytest.raises(CommandError, match="--trees"):
        call_command("duplicate_head_train", pairs=str(pairs_file), out=str(out), trees=True, precision_target=0.9)


def test_a_missing_or_unreadable_pairs_file_is_a_message(tmp_path):
    with pytest.raises(CommandError, match="No labelled pairs"):
        call_command("duplicate_head_train", pairs=str(tmp_path / "nowhere.jsonl"), out=str(tmp_path / "head.json"))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"question": "only one side"}\n')
    with pytest.raises(CommandError, match="not a file of labelled pairs"):
        call_command("duplicate_head_train", pairs=str(wrong), out=str(tmp_path / "head.json"))
    assert not (tmp_path / "head.json").exists()


def test_a_head_of_several_files_splits_each_by_its_file_and_says_where_its_data_came_from(
    pairs_file, tmp_path, capsys
):
    """Two files with the same pair ids: each pair is split by its file's name and id, every file weighs the same, and
    with a precision target the cut is chosen on the files named; the head's meta lists each file with its digest."""
    other = tmp_path / "other" / "pairs.jsonl"
    other.parent.mkdir()
    other.write_text(pairs_file.read_text())
    out = tmp_path / "head.json"
    call_command(
        "duplicate_head_train",
        pairs=[str(pairs_file), str(other)],
        out=str(out),
        precision_target=0.8,
        cut_on=[str(other)],
    )
    printed = capsys.readouterr().out
    assert "chosen penalty" in printed and "peak memory" in printed
    payload = json.loads(out.read_text())
    assert [entry["file"] for entry in payload["data"]] == [str(pairs_file), str(other)]
    both = [pairs_load(path, file_label=file_label_of(path)).held_out for path in (pairs_file, other)]
    assert [entry["held_out_pairs"] for entry in payload["data"]] == [int(b.sum()) for b in both]
    assert (both[0] != both[1]).any()  # equal ids, two files: two splits
    assert payload["cut_chosen_on"] == [file_label_of(other)] and payload["precision_target"] == 0.8
    assert payload["threshold"] == DEFAULT_THRESHOLD  # the gate is the tenant's threshold, not chosen
    assert set(payload["held_out_by_file"]) == {str(pairs_file), str(other)}
    assert pair_model_load(out).meta["embedding_model"] == "all-MiniLM-L6-v2"


def test_a_cut_on_file_must_be_one_of_the_pairs_and_the_model_one_offered(pairs_file, tmp_path):
    with pytest.raises(CommandError, match="not one of --pairs"):
        call_command(
            "duplicate_head_train",
            pairs=str(pairs_file),
            out=str(tmp_path / "head.json"),
            precision_target=0.9,
            cut_on=str(tmp_path / "elsewhere.jsonl"),
        )
    with pytest.raises(CommandError, match="give both"):
        call_command(
            "duplicate_head_train", pairs=str(pairs_file), out=str(tmp_path / "h.json"), cut_on=str(pairs_file)
        )
    with pytest.raises(CommandError, match="not offered"):
        call_command("duplicate_head_train", pairs=str(pairs_file), out=str(tmp_path / "h.json"), model="bge-m3")
    assert not (tmp_path / "head.json").exists() and not (tmp_path / "h.json").exists()


def test_the_default_pairs_are_the_shared_data_beside_the_checkout(settings):
    # The training commands and benches read ../shared/data/qqp/pairs.jsonl beside the checkout, wherever the module
    # that names it lives in the package.
    assert PAIRS == Path(settings.BASE_DIR).resolve().parent / "shared" / "data" / "qqp" / "pairs.jsonl"


def test_a_head_names_shared_data_by_its_place_under_shared_data_wherever_the_checkout_is(tmp_path):
    """A head trained in a worktree elsewhere, or over a linked shared folder, names its data as one beside the
    checkout would: the meta does not carry the trainer's machine paths."""
    real = tmp_path / "disk" / "shared" / "data" / "zh"
    real.mkdir(parents=True)
    (real / "lcqmc.jsonl").write_text("")
    linked = tmp_path / "worktree-parent" / "shared"
    linked.parent.mkdir()
    linked.symlink_to(tmp_path / "disk" / "shared")
    other = tmp_path / "mine.jsonl"
    other.write_text("")
    assert _data_label(real / "lcqmc.jsonl") == "../shared/data/zh/lcqmc.jsonl"
    assert _data_label(linked / "data" / "zh" / "lcqmc.jsonl") == "../shared/data/zh/lcqmc.jsonl"
    assert _data_label(PAIRS) == "../shared/data/qqp/pairs.jsonl"
    assert _data_label(other) == str(other)
