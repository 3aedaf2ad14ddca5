"""How the question rules read Chinese (conversations/dedup/chinese_text.py) on labelled Chinese question pairs: whether
`questions_conflict` refuses duplicates (it should almost never) and non-duplicates (what it is for), and how many
duplicate pairs the follow-up guard reads as context dependent (`question_is_context_dependent`).

Read on LCQMC (general questions) and AFQMC dev (fintech customer service), ../shared/data/zh/. BQ and OPPO are held
out for another issue: do not point this at them while the rules are being tuned.

For each set it prints: pairs, share of duplicates; the share of duplicate pairs refused (numbers, negation) and of
non-duplicate pairs refused; of the refused pairs, the share that are not duplicates; the share of duplicate pairs
with a context-dependent question (either side) and of all questions that are context dependent.

Other sets of the same fields may be passed (../shared/data/qqp/pairs.jsonl gives the English rules' figures to set
these beside). Usage: .venv/bin/python bench/chinese_rules.py [--show N] [PATH ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data" / "zh"
SETS = [DATA / "lcqmc.jsonl", DATA / "afqmc_dev.jsonl"]

from conversations.dedup.question_pairs import question_is_context_dependent, questions_conflict  # noqa: E402


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} = {100 * part / whole:.2f}%" if whole else "0/0"


def measure(path: Path, *, show: int) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    started = time.perf_counter()
    duplicates = [r for r in rows if r["is_duplicate"] == 1]
    others = [r for r in rows if r["is_duplicate"] != 1]
    conflict = {id(r): questions_conflict(r["question1"], r["question2"]) for r in rows}
    dependent = {q: question_is_context_dependent(q) for r in rows for q in (r["question1"], r["question2"])}
    elapsed = time.perf_counter() - started

    print(f"\n{path.name}: {len(rows)} pairs, {_share(len(duplicates), len(rows))} duplicates ({elapsed:.1f} s)")
    for label, group in (("duplicates", duplicates), ("non-duplicates", others)):
        for reason in ("numbers differ", "negation differs"):
            count = sum(conflict[id(r)] == reason for r in group)
            print(f"  {label:15} refused, {reason:17} {_share(count, len(group))}")
        print(f"  {label:15} refused, {'either':17} {_share(sum(bool(conflict[id(r)]) for r in group), len(group))}")
    refused = [r for r in rows if conflict[id(r)]]
    print(
        f"  refused pairs that are not duplicates: {_share(sum(r['is_duplicate'] != 1 for r in refused), len(refused))}"
    )
    leaning = [r for r in duplicates if dependent[r["question1"]] or dependent[r["question2"]]]
    print(f"  duplicate pairs with a context-dependent question: {_share(len(leaning), len(duplicates))}")
    print(f"  questions context dependent: {_share(sum(dependent.values()), len(dependent))}")
    for r in [r for r in duplicates if conflict[id(r)]][:show]:
        print(f"    refused duplicate ({conflict[id(r)]}): {r['question1']} | {r['question2']}")
    for r in leaning[:show]:
        print(f"    dependent duplicate: {r['question1']} | {r['question2']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=SETS)
    parser.add_argument("--show", type=int, default=0, help="print this many refused and dependent duplicates")
    args = parser.parse_args()
    for path in args.paths:
        if path.name in ("bq.jsonl", "oppo.jsonl"):
            sys.exit(f"{path.name} is held out for another issue")
        measure(path, show=args.show)


if __name__ == "__main__":
    main()
