"""The showdown's verdict in words: what the rounds decided, what they could not, and how busy the machine was.

One function builds the sentence that the run stores (``showdown.verdict.text`` in report.json) and that the
console, report.md and report.html print, so no renderer can claim more than the verdict holds. It reads the
showdown document (dicts only), so a report written before a field existed is rendered by the same rule:

    busy      = more than half of the rounds run saw > 0.1 core of other processes' CPU (:func:`contended`)
    undecided = finalists (not the leader) whose paired ratio CI straddles 1 - margin when the rounds ran out
    text      = [busy: "Most rounds ... busy machine ..." first]
                + undecided: "Undecided: ... could not be separated from <leader> ...; picked <pick> by <how>"
                  | a tie:     "Tie within <margin>: ...; picked <pick> (<tie-break>)"
                  | one:       "One finalist: ..."
                  | else:      "<pick> wins: every other finalist's CI shows it more than <margin> slower"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Share of the rounds run that may be disturbed before the verdict is called one of a busy machine.
CONTENDED_SHARE = 0.5


def contended(showdown: Mapping[str, Any]) -> bool:
    """Whether most rounds ran while other processes used the machine (see the module docstring)."""
    run = int(showdown.get("rounds_run") or 0)
    return run > 0 and len(showdown.get("disturbed_rounds") or []) > CONTENDED_SHARE * run


def undecided_keys(verdict: Mapping[str, Any]) -> list[str]:
    """The finalists the rounds could not separate from the leader (stored, or recomputed from the CIs)."""
    if verdict.get("undecided") is not None:
        return [str(k) for k in verdict["undecided"]]
    floor = 1.0 - float(verdict.get("margin") or 0.0)
    return [str(s["key"]) for s in verdict.get("standings") or []
            if s["key"] != verdict.get("leader") and s["ratio_ci"][0] < floor <= s["ratio_ci"][1]]


def _ci(standing: Mapping[str, Any]) -> str:
    lo, hi = standing["ratio_ci"]
    return f"{standing['ratio']:.3f}x, CI {lo:.3f}-{hi:.3f}"


def busy_text(showdown: Mapping[str, Any]) -> str | None:
    """The warning that comes first when most rounds were disturbed (None otherwise)."""
    if not contended(showdown):
        return None
    bad, run = len(showdown.get("disturbed_rounds") or []), int(showdown.get("rounds_run") or 0)
    return (f"Busy machine: {bad} of {run} showdown rounds ran while other processes used more than 0.1 core, "
            "so this verdict compares finalists on a busy machine; run again on a quiet one before relying on it.")


def verdict_text(showdown: Mapping[str, Any], *, busy: bool = True) -> str | None:
    """The verdict in one or two sentences (None when the showdown has no verdict).

    ``busy=False`` leaves out the busy-machine warning, for a caller that has already put it first.
    """
    verdict = showdown.get("verdict")
    if not isinstance(verdict, Mapping):
        return None
    parts = [t for t in (busy_text(showdown) if busy else None,) if t]
    standings: Sequence[Mapping[str, Any]] = verdict.get("standings") or []
    by_key = {str(s["key"]): s for s in standings}
    margin = float(verdict.get("margin") or 0.0)
    pick, leader = verdict.get("pick"), verdict.get("leader")
    open_keys = undecided_keys(verdict)
    tied = [str(s["key"]) for s in standings if s.get("tied")]
    how = verdict.get("how_picked") or (
        f"the tie-break ({verdict.get('tie_break') or 'simplest execution first'})" if len(tied) > 1
        else "the highest paired median over the rounds")
    if open_keys:
        which = ", ".join(f"{k} ({_ci(by_key[k])})" for k in open_keys if k in by_key)
        parts.append(f"Undecided: when the rounds ran out, {which} could not be separated from the leader {leader} "
                     f"at the {margin:.0%} margin (the CI straddles {1 - margin:.2f}). {pick} was picked by {how}; "
                     "more rounds (measure.rounds) or a quieter machine may pick differently.")
    elif len(standings) < 2:
        parts.append(f"One finalist ({pick}): its rounds in fresh processes give the headline; nothing was compared.")
    elif len(tied) > 1:
        parts.append(f"Tie within {margin:.0%}: {', '.join(tied)}; picked {pick} "
                     f"({verdict.get('tie_break') or 'tie-break'}).")
    else:
        parts.append(f"{pick} wins: every other finalist's CI shows it more than {margin:.0%} slower.")
    return " ".join(parts)
