"""The recommendation as shipped: what its artifact served in plain processes, against the run's own figure and,
side by side, against the tool's own worker on the same configuration.

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
    text = _sentence(doc, check, rate)
    cut = check.get("budget_note")
    return text + (f" (The time budget allowed {cut}.)" if isinstance(cut, str) and cut else "")


def _which(check: Mapping[str, Any], rounds: Any) -> str:
    """The rounds the median is of: all of them, or the undisturbed ones ("the 5 undisturbed of 7")."""
    compared = check.get("compared")
    if isinstance(compared, int) and isinstance(rounds, int) and compared < rounds:
        return f"the {compared} undisturbed of {rounds}"
    return str(rounds)


def _disturbance(check: Mapping[str, Any]) -> str:
    """What disturbed the check's rounds, when any were: how many, left out or not, and who used the CPU (the
    busiest process the kernel named). Empty for a quiet check."""
    disturbed = check.get("disturbed")
    if not isinstance(disturbed, list) or not any(disturbed):
        return ""
    hit = sum(1 for d in disturbed if d)
    compared = check.get("compared")
    left_out = isinstance(compared, int) and compared < len(disturbed)
    foreign = [f for f in check.get("foreign_cores") or [] if is_number(f)]
    consumers = [c for c in check.get("consumers") or [] if isinstance(c, Mapping) and c.get("name")]
    busiest = max(consumers, key=lambda c: float(c.get("cores") or 0.0), default=None)
    who = (f"; {busiest['name']} (pid {busiest.get('pid')}) used {float(busiest.get('cores') or 0):.2f} cores"
           if busiest is not None else "")
    most = f", up to {max(foreign):.2f} cores used by other processes" if foreign and max(foreign) > 0 else ""
    return (f"; {hit} of {len(disturbed)} rounds disturbed{most}{who}"
            + (", left out" if left_out else ": too few quiet rounds to leave them out, so the figure is a busy "
               "machine's"))


def _sentence(doc: Mapping[str, Any], check: Mapping[str, Any], rate: float) -> str:
    rounds = check.get("rounds")
    ci = check.get("ci")
    spread = f", 95% CI {fmt_rate(ci[0])}-{fmt_rate(ci[1])}" if isinstance(ci, list) and len(ci) == 2 else ""
    rec = doc.get("recommendation")
    headline = isinstance(rec, Mapping) and rec.get("throughput_source") == "artifact"
    text = (f"As shipped: {'the figures above are' if headline else 'its artifact served'} "
            + ("its artifact's, " if headline else "")
            + f"{fmt_rate(rate)} samples/s (median of {_which(check, rounds)} fresh plain processes running load.py in "
            f"run.sh's environment{spread}; p50 {fmt_ms(check.get('p50_ms'))} ms, p99 {fmt_ms(check.get('p99_ms'))} "
            f"ms per batch{_disturbance(check)})")
    ratio, reported = check.get("ratio"), check.get("reported")
    tol = float(check.get("tolerance") or 0.05)
    tolerance = f"±{100 * tol:.0f}%"
    verdict = check.get("verdict")
    paired, paired_ci = check.get("paired_ratio"), check.get("paired_ci")
    if is_number(ratio) and is_number(reported):
        text += f", {ratio:.2f}x the {fmt_rate(reported)} samples/s the run measured"
    if is_number(paired):
        interval = (f", 95% CI {paired_ci[0]:.2f}-{paired_ci[1]:.2f}" if isinstance(paired_ci, list)
                    and len(paired_ci) == 2 else "")
        text += (f"; side by side with the tool's own worker on the same configuration, round by round, the artifact "
                 f"ran at {paired:.2f}x{interval}")
        if verdict == "agrees":
            return text + f": it delivers what the tool measures, within {tolerance}."
        if verdict == "undecided":
            where = "within" if abs(paired - 1) <= tol else "outside"
            return text + (f": {where} {tolerance} on the mean, but the interval is too wide to show agreement or a "
                           "gap (more rounds would say: --artifact-check-rounds).")
        way = "slower" if paired < 1 else "faster"
        return text + (f": {100 * abs(1 - paired):.0f}% {way} than the tool measures it, outside {tolerance}; "
                       "expect the artifact's figure in deployment.")
    if is_number(ratio) and is_number(reported):
        if verdict == "agrees":
            text += f": within {tolerance}."
        elif verdict == "undecided":
            text += (f": the plain processes spread too widely to show agreement within {tolerance} or a gap (more "
                     "rounds would say: --artifact-check-rounds).")
        else:
            way = "slower" if ratio < 1 else "faster"
            text += (f": {100 * abs(1 - ratio):.0f}% {way} than the run measured, outside {tolerance}; "
                     "expect the artifact's figure in deployment.")
    else:
        text += "."
    return text
