"""The recommendation as shipped: what its artifact served in plain processes, against the run's own figure.

One sentence for every report form (console, md, html), from ``report.json``'s ``artifact_check``
(:mod:`autotune.artifact_check`). The artifact's figure comes first because it is what a deployment gets; the
run's figure is what ranked the candidates. Outside the +-5% agreement the sentence says which way and by how
much, so a reader never takes the run's figure for the deployment's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.report.format import fmt_ms, fmt_rate
from autotune.report.schema import is_number

__all__ = ["shipped_sentence"]


def shipped_sentence(doc: Mapping[str, Any]) -> str | None:
    """The artifact check in one sentence, or None when the run did not check its artifact."""
    check = doc.get("artifact_check")
    if not isinstance(check, Mapping):
        return None
    status = check.get("status")
    if status == "skipped":
        return f"As shipped: not timed ({check.get('reason')})."
    if status != "ok":
        return (f"As shipped: the artifact's plain-process check failed ({str(check.get('reason'))[:300]}); the "
                "figures above are the run's own.")
    rate = check.get("throughput")
    if not is_number(rate):
        return None
    rounds = check.get("rounds")
    ci = check.get("ci")
    spread = f", 95% CI {fmt_rate(ci[0])}-{fmt_rate(ci[1])}" if isinstance(ci, list) and len(ci) == 2 else ""
    text = (f"As shipped: its artifact served {fmt_rate(rate)} samples/s (median of {rounds} fresh plain processes "
            f"running load.py in run.sh's environment{spread}; p50 {fmt_ms(check.get('p50_ms'))} ms, p99 "
            f"{fmt_ms(check.get('p99_ms'))} ms per batch)")
    ratio, reported = check.get("ratio"), check.get("reported")
    if is_number(ratio) and is_number(reported):
        tolerance = float(check.get("tolerance") or 0.05)
        text += f", {ratio:.2f}x the run's {fmt_rate(reported)} samples/s"
        if check.get("agrees"):
            text += f": within ±{100 * tolerance:.0f}%."
        else:
            way = "slower" if ratio < 1 else "faster"
            text += (f": {100 * abs(1 - ratio):.0f}% {way} than the run measured, outside ±{100 * tolerance:.0f}%; "
                     "expect the artifact's figure in deployment.")
    else:
        text += "."
    return text
