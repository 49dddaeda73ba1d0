"""Greedy tokens against the reference's: fp32 exactly, lower precisions within a token-agreement budget.

Pure. Once a sequence's tokens differ, everything after is conditioned on a different context, so positions
after a prompt's first difference are not compared: a prompt agrees on the prefix before its first
difference. fp32 configurations must agree on every compared position (the first difference is reported: prompt
and position). A lower precision's agreement is the share of compared positions inside the agreeing prefixes;
it passes when the lower end of that share's 95% Wilson interval is at least the budget, so a budget judged on
few tokens says how sure it is instead of passing on luck.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.stats import Z95, wilson_interval


@dataclass(frozen=True)
class TokenCheck:
    passed: bool
    compared: int
    agreeing: int
    prompts: int
    prompts_identical: int
    #: (prompt index, token position) of the first difference, None when every compared token agrees
    first_difference: tuple[int, int] | None
    share: float
    share_low: float
    budget: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "compared_tokens": self.compared, "agreeing_tokens": self.agreeing,
                "prompts": self.prompts, "prompts_identical": self.prompts_identical,
                "first_difference": list(self.first_difference) if self.first_difference else None,
                "agreement": self.share, "agreement_low": self.share_low, "budget": self.budget,
                "reason": self.reason}


def wilson_low(k: int, n: int, z: float = Z95) -> float:
    """The lower end of ``k / n``'s Wilson interval (0 when nothing was compared)."""
    return wilson_interval(k, n, z)[0] if n > 0 else 0.0


def check_tokens(reference: Sequence[Sequence[int]], got: Sequence[Sequence[int]], *, exact: bool,
                 budget: float) -> TokenCheck:
    """``got`` (one token list per prompt) against ``reference``; ``exact``: fp32's rule, else the budget's."""
    if len(reference) != len(got):
        return TokenCheck(False, 0, 0, len(reference), 0, None, 0.0, 0.0, None if exact else budget,
                          f"{len(got)} prompts' tokens for {len(reference)} prompts")
    compared = agreeing = identical = 0
    first: tuple[int, int] | None = None
    for i, (ref, out) in enumerate(zip(reference, got, strict=True)):
        n = min(len(ref), len(out))
        same = next((j for j in range(n) if ref[j] != out[j]), n)
        compared += n
        agreeing += same
        identical += same == n
        if same < n and first is None:
            first = (i, same)
    share = agreeing / compared if compared else 0.0
    low = wilson_low(agreeing, compared)
    if exact:
        passed = first is None and compared > 0
        reason = "" if passed else (
            f"greedy tokens differ from eager fp32's: prompt {first[0]}, token {first[1]}" if first else
            "no tokens compared")
        return TokenCheck(passed, compared, agreeing, len(reference), identical, first, share, low, None, reason)
    passed = low >= budget
    reason = "" if passed else (
        f"token agreement {share:.1%} (95% lower bound {low:.1%} over {compared} tokens) is under the budget "
        f"{budget:.0%}; first difference: prompt {first[0]}, token {first[1]}" if first else
        f"{compared} tokens are too few to show agreement >= {budget:.0%} (95% lower bound {low:.1%})")
    return TokenCheck(passed, compared, agreeing, len(reference), identical, first, share, low, budget, reason)
