"""Progress events: how a long tuning tells its caller what it is doing.

The library never draws progress itself. :func:`autotune.tune` and the pipeline behind it call an
``on_event`` callback with :class:`Event` values; the CLI's tqdm bar is one consumer
(``autotune.cli``), a notebook printing lines is another, and ``None`` means silence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

#: What happened. ``candidate_start`` / ``candidate_done`` carry ``variant``, ``batch_size``,
#: ``total`` (candidates in the space) and, when done, ``row`` (the candidate record) and ``best``.
#: ``boundary`` starts a variant's boundary search; ``boundary_probe`` is one of its probes (``variant``,
#: ``batch_size``, ``phase``, ``predicted_seconds`` or None, ``seconds``, ``fits``); ``boundary_found`` its
#: answer (``variant``, ``document`` or ``failure``), stored in the study at once.
EventKind = Literal["validated", "boundary", "boundary_probe", "boundary_found", "candidate_start",
                    "candidate_done", "showdown", "artifact", "serving", "generate", "done"]


@dataclass(frozen=True)
class Event:
    kind: EventKind
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


OnEvent = Callable[[Event], None]


def emit(on_event: OnEvent | None, kind: EventKind, message: str, **data: Any) -> None:
    """Call ``on_event`` if there is one (the one place that checks for None)."""
    if on_event is not None:
        on_event(Event(kind, message, data))


__all__ = ["Event", "EventKind", "OnEvent", "emit"]
