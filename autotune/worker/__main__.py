"""``python -m autotune.worker [--role measure|probe]``: serve requests until stdin closes."""

from autotune.worker.ops import main

raise SystemExit(main())
