"""Which MTRAG turns one replay loses against another, and why: read from `bench/conversations.py --turns-out` records
(best with `--legs`, which says what each side of a turn's first search found).

    .venv/bin/python bench/mtrag_turn_diff.py turns.jsonl [--base "default policy [semantic]"]
        [--other "default policy [hybrid rrf]"]
        [--list tune]

Turns are paired by (conversation, turn). For every turn where novel recall@5 differs, the reason the other replay
lost (or gained) it is one of:

- `novel set differs`: the two replays count different passages as novel at this turn, because what each showed
  earlier differs (exclusion and the novel count follow from earlier turns): not this turn's ranking;
- `displaced by BM25`: a novel relevant passage the base showed was in the other replay's dense top 5 (after its
  exclusions) but fusion put passages the dense side did not rank in its top 5 above it;
- `dense rank differs`: it was not in the other replay's dense top 5 (its exclusions left other passages above it);
- `fusion found it`: the reverse of a displacement, a gain: the other replay showed a novel relevant passage its own
  dense top 5 did not hold;
- `unknown`: no legs recorded.

Sums of differences are per half and per kind of turn (follow-up or standalone), in units of a turn's full recall.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict

TOP = 5


def reason_of(base: dict, other: dict) -> str:
    """Why `other`'s novel recall@5 at a turn differs from `base`'s (see the module). Pure."""
    if set(base["novel"]) != set(other["novel"]):
        return "novel set differs"
    legs = other.get("legs")
    if not legs:
        return "unknown"
    dense_top = set(legs["dense"][:TOP])
    novel = set(base["novel"])
    lost = (novel & set(base["shown"])) - set(other["shown"])
    if other["novel_recall"] < base["novel_recall"] and lost:
        if lost & dense_top:
            return "displaced by BM25"
        return "dense rank differs"
    gained = (novel & set(other["shown"])) - set(base["shown"])
    if gained - dense_top:
        return "fusion found it"
    return "dense rank differs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("turns", help="a --turns-out file of bench/conversations.py")
    parser.add_argument("--base", default="default policy [semantic]")
    parser.add_argument("--other", default="default policy [hybrid rrf]")
    parser.add_argument("--list", default="", help="list each differing turn of this half (tune, test or all)")
    args = parser.parse_args()
    runs: dict[str, dict] = defaultdict(dict)
    for line in open(args.turns, encoding="utf-8"):
        record = json.loads(line)
        runs[record["label"]][(record["conversation"], record["turn"])] = record
    if args.base not in runs or args.other not in runs:
        raise SystemExit(f"labels in the file: {sorted(runs)}")
    base, other = runs[args.base], runs[args.other]
    sums: dict[tuple, float] = defaultdict(float)
    counts: Counter = Counter()
    reasons: dict[tuple, Counter] = defaultdict(Counter)
    listed = []
    one_sided: dict[str, list[float]] = {"base": [], "other": []}  # turns with a novel passage in one replay only
    for key in sorted(base):
        mine, theirs = base[key], other.get(key)
        if theirs is None or (mine["novel_recall"] is None and theirs["novel_recall"] is None):
            continue
        if mine["novel_recall"] is None or theirs["novel_recall"] is None:
            side, record = ("base", mine) if theirs["novel_recall"] is None else ("other", theirs)
            one_sided[side].append(record["novel_recall"])
            continue
        delta = theirs["novel_recall"] - mine["novel_recall"]
        if not delta:
            continue
        half = "tune" if key[0] % 2 == 0 else "test"
        kind = "follow-up" if mine["followup"] else "standalone"
        routed = (theirs.get("legs") or {}).get("mode", "")
        reason = reason_of(mine, theirs)
        for bucket in ((half, kind), (half, "all"), ("all", kind), ("all", "all")):
            sums[bucket] += delta
            counts[(*bucket, "lost" if delta < 0 else "gained")] += 1
            reasons[bucket][f"{'lost' if delta < 0 else 'gained'}: {reason}"] += delta
        if args.list in (half, "all"):
            listed.append((key, half, kind, routed, delta, reason, mine, theirs))
    print(f"{args.other} against {args.base}: novel recall@5 summed over the turns where it differs")
    print(f"{'half':<5} {'turns':<10} {'sum':>7} {'lost':>5} {'gained':>6}  by reason (sum)")
    for half in ("tune", "test", "all"):
        for kind in ("follow-up", "standalone", "all"):
            bucket = (half, kind)
            detail = ", ".join(f"{name} {value:+.2f}" for name, value in sorted(reasons[bucket].items()))
            print(
                f"{half:<5} {kind:<10} {sums[bucket]:>+7.2f} {counts[(*bucket, 'lost')]:>5} "
                f"{counts[(*bucket, 'gained')]:>6}  {detail}"
            )
    for side, values in one_sided.items():
        print(
            f"turns with a novel relevant passage in the {side} replay only (left out above, but in its mean): "
            f"{len(values)}, their novel recall@5 summed {sum(values):.2f}"
        )
    for key, half, kind, routed, delta, reason, mine, theirs in listed:
        print()
        print(f"conversation {key[0]} turn {key[1]} ({half}, {kind}, searched {routed or '?'}): {delta:+.2f}, {reason}")
        print(f"  question: {mine['question'][:150]}")
        print(f"  novel relevant: {mine['novel']} / other: {theirs['novel']}")
        print(f"  base shown:  {mine['shown']}")
        print(f"  other shown: {theirs['shown']}")
        legs = theirs.get("legs")
        if legs:
            print(f"  other dense: {legs['dense'][:10]}")
            print(f"  other bm25:  {legs['bm25'][:10]}")


if __name__ == "__main__":
    main()
