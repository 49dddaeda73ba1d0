"""``python -m autotune`` — same as the ``autotune`` console script."""

from __future__ import annotations

from autotune.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
