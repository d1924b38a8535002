"""Follows the chief from another task: has it started, has it finished?

The chief listens on its TF_CONFIG address while it trains. A watch probes that address every
few seconds from a daemon thread: the chief is seen once it answers, and finished once it has
been seen and then misses `GONE_AFTER_MISSES` probes in a row. Tasks that outlive no chief
(parameter-server workers and ps, the evaluator) use it to stop instead of waiting forever.
"""

import threading
import time

from tfdist.cluster.probe import answers
from tfdist.strategies import ClusterConfig

PROBE_EVERY_S = 2.0
GONE_AFTER_MISSES = 3


def chief_address(cluster: ClusterConfig) -> str:
    """The chief's host:port: the "chief" task, else worker 0."""
    return cluster.jobs["chief"][0] if cluster.has_chief else cluster.jobs["worker"][0]


class ChiefWatch:
    """Probes the chief at `address` until it has come and gone; `start` begins."""

    def __init__(self, address: str):
        self.address = address
        self._started = time.monotonic()
        self._seen = threading.Event()
        self._finished = threading.Event()

    def start(self) -> "ChiefWatch":
        threading.Thread(target=self._probe, daemon=True, name="chief-watch").start()
        return self

    @property
    def seen(self) -> bool:
        return self._seen.is_set()

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def unseen_for_s(self) -> float:
        """Seconds since the watch started, while the chief has never answered; else 0."""
        return 0.0 if self.seen else time.monotonic() - self._started

    def wait_finished(self, timeout_s: float) -> bool:
        """Waits up to `timeout_s` for the chief to finish; returns whether it has."""
        return self._finished.wait(timeout_s)

    def _probe(self) -> None:
        misses = 0
        while True:
            if answers(self.address):
                self._seen.set()
                misses = 0
            elif self.seen:
                misses += 1
                if misses >= GONE_AFTER_MISSES:
                    self._finished.set()
                    return
            time.sleep(PROBE_EVERY_S)
