"""Liveness of a study's trials: heartbeats from the process measuring a trial, stale trials failed by any other.

A trial is RUNNING from ask to tell. A process killed in between (SIGKILL, the OOM killer, a reboot) cannot
tell it anything, and a RUNNING trial counts as "being measured elsewhere", so without a heartbeat every
later run or worker would skip that combination and wait for it until its time budget.

So the trial's process records a heartbeat every :data:`HEARTBEAT_INTERVAL_S` from a background thread
(:class:`Heartbeat`; ask/tell does not do it, only ``Study.optimize`` does), and any process of the study
fails a RUNNING trial whose last heartbeat is older than :data:`HEARTBEAT_GRACE_S` (:func:`fail_stale_trials`,
at the top of the search loop). The times are the database's own clock (SQL ``now()``), so machines with
skewed clocks agree. The interval is cheap (one small write per running trial); the grace is six missed
beats, so a live process survives a slow disk, an SQLite lock held by another writer or a reconnect after a
dropped connection, while a dead process holds its combination back for about a minute, not for the rest of
everyone's time budget. :func:`autotune.study.storage.make_storage` gives the storage both values, read
from this module at call time.

Algorithm::

    every process, at the top of each loop iteration:
        fail every RUNNING trial whose last heartbeat is older than the grace      (fail_stale_trials)
        record one heartbeat for every RUNNING trial that has none      (start_heartbeats_of_beatless_trials)
    the process measuring a trial, from ask to tell:
        beat at once (in the caller's thread), then every interval from a daemon thread      (Heartbeat)
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
from collections.abc import Iterator
from types import TracebackType

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning

#: Seconds between heartbeats of a RUNNING trial (integer: Optuna's RDBStorage accepts nothing else).
HEARTBEAT_INTERVAL_S = 10
#: Seconds without a heartbeat after which another process fails a RUNNING trial as stale (integer).
HEARTBEAT_GRACE_S = 60
#: What the heartbeat adds to Optuna's messages: noise for a user of ask/tell (see :func:`quiet_heartbeat`).
_HEARTBEAT_WARNING = "Heartbeat of storage is supposed to be used with Study.optimize"


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the RUNNING trials whose heartbeat stopped: their process is dead (see the module docstring).

    The trial becomes FAIL without a row, so its combination counts neither as measured nor as in flight,
    and is measured again. Two processes failing the same trial at once is handled by Optuna.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


#: RUNNING trials of a study that have no heartbeat row at all (Optuna never considers those stale).
_BEATLESS = sqlalchemy.text(
    "SELECT t.trial_id FROM trials t WHERE t.study_id = :study AND t.state = 'RUNNING' "
    "AND NOT EXISTS (SELECT 1 FROM trial_heartbeats h WHERE h.trial_id = t.trial_id)")


def start_heartbeats_of_beatless_trials(storage: optuna.storages.RDBStorage, study_id: int) -> list[int]:
    """Record one heartbeat for every RUNNING trial that has none; returns their ids.

    Optuna fails a RUNNING trial as stale only by its last heartbeat, and a trial without any is never stale:
    one whose process was killed between ask and its first beat, or one left by an older autotune that did
    not beat, would count as "being measured elsewhere" forever. One beat recorded on its behalf starts the
    grace period on the database's clock: a live owner (about to write its first beat) simply goes on beating,
    a dead one is failed by :func:`fail_stale_trials` after :data:`HEARTBEAT_GRACE_S`, like any other stale
    trial. Two processes doing this at once is harmless (Optuna ignores the duplicate heartbeat row).
    """
    with storage.engine.connect() as con:
        ids = [int(row[0]) for row in con.execute(_BEATLESS, {"study": study_id})]
    for trial_id in ids:
        storage.record_heartbeat(trial_id)
    return ids


class Heartbeat:
    """Records one trial's heartbeat now and then every interval from a daemon thread, until the block ends.

    Why a thread: a candidate is measured for minutes in a worker process while this process waits on its
    pipe; ``Study.optimize`` runs the same kind of thread, but ask/tell records nothing. The first beat is
    written at once, in the caller's thread: a trial with no heartbeat at all is never considered stale by
    Optuna, so a process killed before the first interval would otherwise leave its trial RUNNING forever.
    A failed beat (a dropped connection, a locked SQLite file) is skipped: the next one reconnects, and the
    grace period allows several misses.
    """

    def __init__(self, storage: optuna.storages.RDBStorage, trial_id: int) -> None:
        self._storage = storage
        self._trial_id = trial_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> None:
        self._storage.record_heartbeat(self._trial_id)
        interval = self._storage.get_heartbeat_interval()
        if interval is None:
            return
        self._thread = threading.Thread(target=self._beat, args=(float(interval),), daemon=True,
                                        name=f"autotune-heartbeat-{self._trial_id}")
        self._thread.start()

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with contextlib.suppress(Exception):
                self._storage.record_heartbeat(self._trial_id)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@contextlib.contextmanager
def quiet_heartbeat() -> Iterator[None]:
    """Silence Optuna's warning that a heartbeat is meant for ``Study.optimize``: here ask/tell is paired
    with :class:`Heartbeat`, which does what optimize does."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(_HEARTBEAT_WARNING))
        yield
