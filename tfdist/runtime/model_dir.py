"""The layout of a `--model_dir`: every path tfdist writes under it, in one place, and the lock
that makes a run the only one writing it. Pure Python.

    MODEL_DIR/.tfdist.lock              who holds the model dir (`owned`)
    MODEL_DIR/backup/                   training state, restored when a run restarts
    MODEL_DIR/checkpoints/epoch-NNN     each epoch's weights, which the evaluator reads
    MODEL_DIR/logs/                     TensorBoard (logs/evaluator: the evaluator's)
    MODEL_DIR/history.json              every epoch's metrics, across restarts
    MODEL_DIR/evaluations.json          the evaluator's results by checkpoint
    MODEL_DIR/loop_checkpoints/         `CustomLoop`'s checkpoints

Tasks other than the one that writes results save into a scratch directory beside the real one
(`scratch`), since every worker must take part in saving; it is deleted after each save. The
lock dies with the process that held it: a crashed run leaves nothing stuck.
"""

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import os
import socket
from typing import Iterator

from tfdist.runtime.config import ConfigError

CHECKPOINT_PREFIX = "epoch-"
_LOCK_FILE = ".tfdist.lock"


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """The paths under the model dir `root`."""
    root: str

    @property
    def backup(self) -> str:
        return os.path.join(self.root, "backup")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.root, "checkpoints")

    def checkpoint(self, epochs_done: int | str) -> str:
        """The weights after `epochs_done` epochs (or a Keras filepath pattern for it)."""
        return os.path.join(self.checkpoints, f"{CHECKPOINT_PREFIX}{epochs_done:03d}"
                            if isinstance(epochs_done, int) else
                            f"{CHECKPOINT_PREFIX}{epochs_done}")

    def logs(self, task: str = "") -> str:
        """TensorBoard's directory: the trainer's, or the `task`'s (`evaluator`)."""
        return os.path.join(self.root, "logs", task)

    @property
    def history_json(self) -> str:
        return os.path.join(self.root, "history.json")

    @property
    def evaluations_json(self) -> str:
        return os.path.join(self.root, "evaluations.json")

    @property
    def loop_checkpoints(self) -> str:
        return os.path.join(self.root, "loop_checkpoints")

    @property
    def lock(self) -> str:
        return os.path.join(self.root, _LOCK_FILE)

    @staticmethod
    def scratch(path: str, task: str) -> str:
        """Where the task `task` ("worker:1"), which does not write results, saves what the
        writer saves at `path`."""
        return f"{path}-{task.replace(':', '-')}.tmp"

    @contextlib.contextmanager
    def owned(self) -> Iterator[None]:
        """Holds the model dir's lock for the block; the lock file says who holds it.

        Raises:
          ConfigError: another live run holds the lock.
        """
        os.makedirs(self.root, exist_ok=True)
        with open(self.lock, "a+", encoding="utf-8") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                lock.seek(0)
                owner = lock.read().strip() or "another process"
                raise ConfigError(f"model_dir={self.root!r} is in use by another run ({owner}); "
                                  "wait for it to end or stop it, or pass another --model_dir.") \
                    from None
            lock.seek(0)
            lock.truncate()
            lock.write(_owner_line() + "\n")
            lock.flush()
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _owner_line() -> str:
    started = datetime.datetime.now().isoformat(timespec="seconds")
    return f"pid {os.getpid()} on {socket.gethostname()} since {started}"
