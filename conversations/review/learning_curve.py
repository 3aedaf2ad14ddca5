"""A tenant's learning curve, as the verifier versions page draws it: how many reviews it has given, and for each
trained version the figures it was judged by on labels it was not trained on (its precision and recall at its cut,
its best recall at the tenant's precision target, against the decision active when it was trained), which version
decides now. Pure functions: the admin passes in the rows (`selectors.learning_curves`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 16, 14, 34


@dataclass(frozen=True)
class CurvePoint:
    version: int
    labels: int  # the labels it was trained and judged on
    status: str
    judge: str  # which held-out labels judged it (`verifier_training.Judge`)
    kind: str  # "linear" or "trees"
    gate: float | None  # its own cosine gate, when it chose one under the policy's threshold
    precision: float | None  # held out, at its cut (None: it serves none of them)
    recall: float  # held out, at its cut
    recall_at_target: float  # held out, its best cut for the target
    active_recall_at_target: float  # held out, the decision active when it was trained, at its best cut


@dataclass(frozen=True)
class LearningCurve:
    tenant: str
    embedding_model: str  # the model whose verifier it is: each model of a tenant learns on its own
    reviews: int  # labels that train (support verdicts and imports)
    precision_target: float
    points: tuple[CurvePoint, ...]  # in version order
    active_version: int | None  # None: the shipped head decides


def curve_point(*, version: int, labels: int, status: str, figures: dict) -> CurvePoint | None:
    """The point of one trained version, from the figures training stored (`verifier_training.verifier_train`); None
    for a version not trained (queued, training, failed)."""
    judges = figures.get("judges") or {}
    judged = judges.get(figures.get("judge", "")) or judges.get("held_out_labels")
    if not judged:
        return None
    return CurvePoint(
        version=version,
        labels=labels,
        status=status,
        judge=str(figures.get("judge", "")),
        kind=str(figures.get("kind_of_head", "linear")),
        gate=figures.get("gate") if figures.get("gate") != figures.get("threshold") else None,
        precision=judged["new"].get("precision"),
        recall=float(judged["new"].get("recall") or 0.0),
        recall_at_target=float(judged.get("new_recall_at_target") or 0.0),
        active_recall_at_target=float(judged.get("active_recall_at_target") or 0.0),
    )


def _x(labels: int, most: int) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * labels / max(most, 1)


def _y(value: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - min(max(value, 0.0), 1.0))


def curve_svg(curve: LearningCurve) -> str:
    """The curve as an inline SVG: x the labels each version learned from, y held-out figures; recall at the target
    (filled dots, joined), precision at its cut (squares), the active decision's recall at the target when each was
    trained (hollow dots), the precision target as a dashed line; the active version ringed. Every text is escaped."""
    points = curve.points
    most = max([p.labels for p in points] + [curve.reviews, 1])
    parts = [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>'
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>',
            LEFT,
            _y(0),
            WIDTH - RIGHT,
            _y(0),
            LEFT,
            _y(0),
            LEFT,
            _y(1),
        ),  # fmt: skip
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#c60" stroke-dasharray="4 3"/>'
            '<text x="{}" y="{}" font-size="10" fill="#c60" text-anchor="end">precision target {}</text>',
            LEFT,
            _y(curve.precision_target),
            WIDTH - RIGHT,
            _y(curve.precision_target),
            WIDTH - RIGHT,
            _y(curve.precision_target) - 3,
            f"{curve.precision_target:.2f}",
        ),  # fmt: skip
    ]
    for tick in (0.0, 0.5, 1.0):
        parts.append(
            format_html(
                '<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>', LEFT - 4, _y(tick) + 3, f"{tick:.1f}"
            )
        )
    parts.append(
        format_html(
            '<text x="{}" y="{}" font-size="10" text-anchor="end">{} labels</text>'
            '<text x="{}" y="{}" font-size="10">0</text>',
            WIDTH - RIGHT,
            HEIGHT - 8,
            most,
            LEFT,
            HEIGHT - 8,
        )  # fmt: skip
    )
    if len(points) > 1:
        path = " ".join(f"{_x(p.labels, most):.1f},{_y(p.recall_at_target):.1f}" for p in points)
        parts.append(format_html('<polyline points="{}" fill="none" stroke="#36c"/>', path))
    for point in points:
        x = _x(point.labels, most)
        title = (
            f"v{point.version} ({point.status}, {point.kind}"
            + (f", gate {point.gate:.2f}" if point.gate is not None else "")
            + f"): {point.labels} labels; held out, judged on {point.judge}: recall at the target "
            f"{point.recall_at_target:.3f} against {point.active_recall_at_target:.3f}; at its cut precision "
            + ("-" if point.precision is None else f"{point.precision:.3f}")
            + f", recall {point.recall:.3f}"
        )
        parts.append(
            format_html(
                '<g><title>{}</title><circle cx="{}" cy="{}" r="4" fill="#36c"/>'
                '<circle cx="{}" cy="{}" r="3" fill="none" stroke="#888"/></g>',
                title,
                f"{x:.1f}",
                f"{_y(point.recall_at_target):.1f}",
                f"{x:.1f}",
                f"{_y(point.active_recall_at_target):.1f}",
            )  # fmt: skip
        )
        if point.precision is not None:
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="6" height="6" fill="#2a2"><title>{}</title></rect>',
                    f"{x - 3:.1f}",
                    f"{_y(point.precision) - 3:.1f}",
                    title,
                )  # fmt: skip
            )
        if point.version == curve.active_version:
            parts.append(
                format_html(
                    '<circle cx="{}" cy="{}" r="8" fill="none" stroke="#c00" stroke-width="2"/>',
                    f"{x:.1f}",
                    f"{_y(point.recall_at_target):.1f}",
                )  # fmt: skip
            )
    label = f"Learning curve of {curve.tenant} ({curve.embedding_model})"
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img" aria-label="{}">{}</svg>',
        WIDTH,
        HEIGHT,
        label,
        format_html_join("", "{}", ((part,) for part in parts)),
    )


def curves_for_rows(
    *,
    tenant: str,
    embedding_model: str,
    reviews: int,
    precision_target: float,
    rows: Sequence[tuple[int, int, str, dict]],
) -> LearningCurve:
    """The curve of one tenant's verifier of `embedding_model` from its versions' (version, label_count, status,
    figures), any order."""
    points = []
    for version, labels, status, figures in sorted(rows):
        point = curve_point(version=version, labels=labels, status=status, figures=figures or {})
        if point is not None:
            points.append(point)
    active = next((p.version for p in points if p.status == "active"), None)
    return LearningCurve(
        tenant=tenant,
        embedding_model=embedding_model,
        reviews=reviews,
        precision_target=precision_target,
        points=tuple(points),
        active_version=active,
    )
