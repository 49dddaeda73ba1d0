"""``python -m autotune.worker [--role measure|probe]``: serve requests until stdin closes (or the parent dies).

The lifeline (:mod:`autotune.worker.lifeline`) is tied before anything imports torch: a parent killed during the
few seconds of that import still takes the worker with it.
"""

from autotune.worker.lifeline import Lifeline, parent_pid_from_env

lifeline = Lifeline(parent_pid_from_env())
lifeline.start()

from autotune.worker.serve import main  # noqa: E402  (after the lifeline, on purpose)

raise SystemExit(main(lifeline=lifeline))
