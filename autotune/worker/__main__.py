"""``python -m autotune.worker [--role measure|probe]``: serve requests until stdin closes."""

from autotune.worker.serve import main

raise SystemExit(main())
