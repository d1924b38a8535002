"""The layout of a `--model_dir`: every path tfdist writes under it, in one place, and the lock
that makes a run the only one writing it; a room of its own with `storage` (where the files
are: a local path or a URL) and `lease` (the lock on object storage). Pure Python.

    MODEL_DIR/.tfdist.lock              who trains into the model dir (`hold`, `owned`)
    MODEL_DIR/.tfdist-evaluator.lock    who evaluates its checkpoints
    MODEL_DIR/backup/                   training state, restored when a run restarts
    MODEL_DIR/checkpoints/epoch-NNN     each epoch's weights, which the evaluator reads
    MODEL_DIR/logs/                     TensorBoard (logs/evaluator: the evaluator's)
    MODEL_DIR/history.json              every epoch's metrics, across restarts
    MODEL_DIR/save_time.json            the slowest backup save, across restarts
    MODEL_DIR/evaluations.json          the evaluator's results by checkpoint
    MODEL_DIR/loop_checkpoints/         `CustomLoop`'s checkpoints
    MODEL_DIR/notices/TASK              a ps task's preemption notice, for the chief

Tasks other than the one that writes results save into a scratch directory beside the real one
(`scratch`), since every worker must take part in saving; it is deleted after each save. The
lock dies with the process that held it: a crashed run leaves nothing stuck. A trainer's lock
also keeps runs apart whose model dirs nest, either way. A model dir on object storage (a URL)
keeps every file there (`storage`), with a lease for its lock (`lease`).
"""

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import stat
from typing import Iterator

from tfdist.runtime.model_dir import lease
from tfdist.runtime.model_dir import storage
from tfdist.runtime.config import ConfigError

CHECKPOINT_PREFIX = "epoch-"
TRAINER, EVALUATOR = "trainer", "evaluator"
_LOCK_FILE = ".tfdist.lock"
_MAX_DIRS_SEARCHED = 10_000
MAX_RECORD_BYTES = 1 << 20  # A record tfdist writes is a few KB.


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """The paths under the model dir `root`."""

    root: str

    @property
    def backup(self) -> str:
        return os.path.join(self.root, "backup")

    @property
    def has_backup(self) -> bool:
        """Whether a backup is there to resume (either Keras flavour's layout)."""
        return any(
            storage.isfile(os.path.join(self.backup, *task, "checkpoint"))
            for task in ((), ("chief",))
        )

    def resumed_global_batch(self) -> int | None:
        """The global batch of the backup a run resumes here, as the cluster that made it
        recorded it; None when there is no backup, or no record."""
        recorded = read_record(self.cluster_json) if self.has_backup else None
        batch = recorded.get("global_batch_size") if isinstance(recorded, dict) else None
        return batch if isinstance(batch, int) and batch > 0 else None

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.root, "checkpoints")

    @property
    def notices(self) -> str:
        return os.path.join(self.root, "notices")

    def checkpoint(self, epochs_done: int | str) -> str:
        """The weights after `epochs_done` epochs (or a Keras filepath pattern for it)."""
        return os.path.join(
            self.checkpoints,
            f"{CHECKPOINT_PREFIX}{epochs_done:03d}"
            if isinstance(epochs_done, int)
            else f"{CHECKPOINT_PREFIX}{epochs_done}",
        )

    def logs(self, task: str = "") -> str:
        """TensorBoard's directory: the trainer's, or the `task`'s (`evaluator`)."""
        return os.path.join(self.root, "logs", task)

    @property
    def history_json(self) -> str:
        return os.path.join(self.root, "history.json")

    @property
    def cluster_json(self) -> str:
        """The shape of the cluster that trained last (workers, replicas, global batch)."""
        return os.path.join(self.root, "cluster.json")

    @property
    def save_time_json(self) -> str:
        """The slowest backup save of the run's attempts (what a grace period must cover)."""
        return os.path.join(self.root, "save_time.json")

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
    def owned(self, role: str = TRAINER) -> Iterator[None]:
        """Holds the model dir's lock for `role` for the block (see `hold`)."""
        lock = self.hold(role)
        try:
            yield
        finally:
            lock.release()

    def hold(self, role: str = TRAINER) -> "Lock | lease.Lease":
        """Takes the model dir's lock for `role` (TRAINER: `fit`, `CustomLoop`; EVALUATOR: the
        evaluator, beside its trainer) until `release` or this process ends; the lock file says
        who holds it. A trainer is also refused a model dir inside another run's, or holding
        one. On object storage (a URL) the lock is a lease (`lease`), and model dirs that nest
        are not looked for.

        Raises:
          ConfigError: another live run holds it, or a model dir around or inside it; the lock
            file is a symlink or not a regular file; or it cannot be written.
        """
        if storage.is_url(self.root):
            storage.makedirs(self.root)
            lock = lease.Lease.take(self._lock_file(role), self.root)
        else:
            if role == TRAINER:  # Before anything is made: a refused run leaves nothing.
                _refuse_nested(self.root)
            os.makedirs(self.root, exist_ok=True)
            lock = Lock.take(self._lock_file(role), self.root)
        try:
            self._refuse_planted(role)
        except ConfigError:
            lock.release()
            raise
        return lock

    def _refuse_planted(self, role: str) -> None:
        """Raises ConfigError when a path that `role` writes under the model dir holds what
        tfdist never makes there: a link, a record that is not a regular file, a directory
        that is not one, or in tfdist's directories anything but files and directories
        (TensorFlow writes a checkpoint's index through a link at its name). Anyone who can
        write a shared volume could plant one, and a run (often root in a container) would
        write through it. Checked as the run starts: one planted later is not seen."""
        if role == TRAINER:
            records = (self.history_json, self.cluster_json, self.save_time_json)
            directories = (self.backup, self.checkpoints, self.logs(), self.notices)
            directories += (self.loop_checkpoints,)
        else:
            records, directories = (self.evaluations_json,), (self.logs(), self.logs(role))
        wanted = dict.fromkeys(records, (storage.REGULAR_FILE,))
        wanted.update(dict.fromkeys(directories, (storage.DIRECTORY,)))
        if role == TRAINER:
            for directory in (*directories, os.path.join(self.backup, "chief")):
                wanted.update(dict.fromkeys(_entries(directory), _FILES_OR_DIRECTORIES))
        for path, kinds in wanted.items():
            found = storage.local_kind(path)
            if found not in (None, *kinds):
                raise ConfigError(
                    f"model_dir={self.root!r}: {path} is {found}, where tfdist makes "
                    f"{' or '.join(kinds)} and never writes through anything else; remove "
                    "it, or pass another model_dir=DIR."
                )

    def _lock_file(self, role: str) -> str:
        return self.lock if role == TRAINER else os.path.join(self.root, f".tfdist-{role}.lock")


class Lock:
    """An exclusive flock on a lock file, opened without following a symlink."""

    def __init__(self, descriptor: int):
        self._descriptor = descriptor

    @classmethod
    def take(cls, path: str, root: str) -> "Lock":
        """Locks `path` (made if missing) for the model dir `root` and writes who holds it."""
        try:
            descriptor = os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666
            )
        except OSError as error:
            what = (
                "is a symlink; tfdist never follows its lock file, so remove it"
                if error.errno == errno.ELOOP
                else f"cannot be opened ({error.strerror})"
            )
            raise ConfigError(
                f"model_dir={root!r}: its lock file {path} {what}; or pass another model_dir=DIR."
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise ConfigError(
                    f"model_dir={root!r}: its lock file {path} is not a regular "
                    "file; remove it, or pass another model_dir=DIR."
                )
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(
                    f"model_dir={root!r} is in use by another run "
                    f"({_owner(descriptor)}); wait for it to end or stop it, or "
                    "pass another model_dir=DIR."
                ) from None
            try:
                os.ftruncate(descriptor, 0)
                os.pwrite(descriptor, (lease.owner_line() + "\n").encode(), 0)
            except OSError as error:
                raise ConfigError(
                    f"model_dir={root!r}: cannot write its lock file "
                    f"({error.strerror}); free space there, or pass another "
                    "model_dir=DIR."
                ) from None
        except BaseException:
            os.close(descriptor)
            raise
        return cls(descriptor)

    def release(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)  # Closing drops the flock.
            self._descriptor = -1


def read_record(path: str) -> object | None:
    """The JSON tfdist recorded at `path` in a model dir; None when there is none, or what is
    there is not a regular file (a link, a FIFO), is over MAX_RECORD_BYTES or is not JSON: what
    someone else planted there, or a damaged record, is no reason to stop a run."""
    if storage.is_url(path):
        data = storage.read_url(path, MAX_RECORD_BYTES)
    else:
        data = _read_local(path)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


_FILES_OR_DIRECTORIES = (storage.REGULAR_FILE, storage.DIRECTORY)


def _entries(directory: str) -> list[str]:
    """The paths in the local `directory` (its first `_MAX_DIRS_SEARCHED`); [] when it is not
    one here."""
    local = storage.on_this_machine(directory)
    if local is None:  # Object storage: no links there (and scandir(None) would list ".").
        return []
    try:
        with os.scandir(local) as entries:
            return [entry.path for entry, _ in zip(entries, range(_MAX_DIRS_SEARCHED))]
    except OSError:
        return []


def _read_local(path: str) -> bytes | None:
    """The bytes of the regular file `path`, or None (see `read_record`)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_RECORD_BYTES:
            return None
        return os.read(descriptor, MAX_RECORD_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _owner(descriptor: int) -> str:
    return os.pread(descriptor, 4096, 0).decode(errors="replace").strip() or "another process"


def _holder(lock_path: str) -> str | None:
    """Who holds the lock file `lock_path` (another open of it, this process's included); None
    when nobody does or it is not a lock file."""
    try:
        descriptor = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _owner(descriptor)
    finally:
        os.close(descriptor)


def _refuse_nested(root: str) -> None:
    """Raises ConfigError when a live run holds a model dir around `root`, or inside it (its
    first `_MAX_DIRS_SEARCHED` directories)."""
    directory = os.path.abspath(root)
    while (parent := os.path.dirname(directory)) != directory:
        holder = _holder(os.path.join(parent, _LOCK_FILE))
        if holder:
            raise ConfigError(
                f"model_dir={root!r} lies inside {parent!r}, the model dir of "
                f"another run ({holder}); pass a directory outside it."
            )
        directory = parent
    for searched, (directory, _, files) in enumerate(os.walk(root)):
        if searched >= _MAX_DIRS_SEARCHED:
            return
        holder = (
            directory != root
            and _LOCK_FILE in files
            and _holder(os.path.join(directory, _LOCK_FILE))
        )
        if holder:
            raise ConfigError(
                f"model_dir={root!r} holds {directory!r}, the model dir of another "
                f"run ({holder}); pass a directory that does not."
            )
