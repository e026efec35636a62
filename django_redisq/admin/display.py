"""How the admin shows figures: the per-minute chart as SVG points, ages and run times in words."""

from __future__ import annotations

from typing import Any


def chart(series: list[tuple[Any, int, int, int]], width: int = 100, height: int = 36) -> dict[str, Any]:
    """Polyline points for processed and failed-or-dead per minute: a server-side SVG, no script."""
    peak = max([max(p, f + d) for _, p, f, d in series] + [1])
    step = width / max(1, len(series) - 1)

    def points(values: list[int]) -> str:
        return " ".join(f"{i * step:.1f},{height - v * (height - 2) / peak - 1:.1f}" for i, v in enumerate(values))

    return {
        "width": width, "height": height, "peak": peak,
        "processed": points([p for _, p, _, _ in series]),
        "failed": points([f + d for _, _, f, d in series]),
    }


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def percentile_time(seconds: float) -> str:
    """A p50 / p95 read back from the duration buckets (store/reads/durations.py): the first bucket holds every run
    of a millisecond or less, so a percentile inside it is "≤ 1 ms", not the 0.5 and 0.95 ms its interpolation
    gives every sub-millisecond task."""
    return "≤ 1 ms" if seconds <= 0.001 else run_time(seconds)


def run_time(seconds: float) -> str:
    """A task's run time: milliseconds below a second, then as ``duration``."""
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else duration(seconds)
