"""Where a run resumes, read from its model dir without a model: the backup's position (either
Keras flavour's, and `CustomLoop`'s counters), whether the run finished (its history's record),
the epochs recorded so far, and the lines that say which.

    MODEL_DIR/backup/[chief/]    the training state: tf-keras' (in chief/), Keras 3's
    MODEL_DIR/history.json       every epoch's logs, and {"finished": ...} once the run is done
"""

import os
import stat
import sys

import tensorflow as tf

from tfdist.runtime.config import ConfigError
from tfdist.runtime.model_dir import read_record
from tfdist.runtime.model_dir import storage


def say_resuming(epoch: int, left: str, step: int = 1) -> None:
    """Says on stderr that training resumes at `step` of `epoch` (both from 1) from what `left`
    left."""
    where = f"epoch {epoch}" + (f" step {step}" if step > 1 else "")
    print(
        f"tfdist: resuming at {where} from {left} left in this --model_dir; pass another "
        "--model_dir to start afresh",
        file=sys.stderr,
        flush=True,
    )


_MAX_POINTER_BYTES = 1 << 16  # A `checkpoint` file TensorFlow writes is a few lines.


class DamagedBackup(ConfigError):
    """A backup in a model dir that cannot be what TensorFlow wrote; one line names it and the
    fix."""


def latest_backup(backup_dir: str) -> str | None:
    """The latest checkpoint of the backup in `backup_dir` (either flavour's: tf-keras' in
    chief/, then Keras 3's); None when there is none. Its files are checked before TensorFlow
    reads a byte of them (`_checked`).

    Raises:
      DamagedBackup: the backup's files are links, FIFOs or not what TensorFlow writes.
    """
    for task_dir in (os.path.join(backup_dir, "chief"), backup_dir):
        _check_file(backup_dir, os.path.join(task_dir, "checkpoint"), _MAX_POINTER_BYTES)
        try:
            latest = tf.train.latest_checkpoint(task_dir)
        except (tf.errors.OpError, ValueError) as error:  # A pointer TensorFlow cannot parse.
            raise _damaged(backup_dir, os.path.join(task_dir, "checkpoint"), error) from None
        if latest:
            return _checked(backup_dir, task_dir, latest)
        if storage.isfile(os.path.join(task_dir, "checkpoint")):  # It names nothing there.
            raise _damaged(backup_dir, os.path.join(task_dir, "checkpoint"), "names no checkpoint")
    return None


def _checked(backup_dir: str, task_dir: str, latest: str) -> str:
    """`latest`, once it lies in `task_dir` and its index and data files are regular files."""
    if storage.is_url(latest):
        return latest
    inside = os.path.commonpath([os.path.abspath(latest), os.path.abspath(task_dir)])
    if inside != os.path.abspath(task_dir):
        raise _damaged(backup_dir, os.path.join(task_dir, "checkpoint"), "it names " + latest)
    for name in os.listdir(task_dir):
        if name.startswith(os.path.basename(latest) + "."):
            _check_file(backup_dir, os.path.join(task_dir, name))
    return latest


def _check_file(backup_dir: str, path: str, limit: int | None = None) -> None:
    """Raises DamagedBackup when the local file `path`, if there, is a link, not a regular file
    or larger than `limit` bytes."""
    local = storage.on_this_machine(path)
    if local is None:  # Object storage: no links, no FIFOs.
        return
    try:
        status = os.lstat(local)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(status.st_mode):
        raise _damaged(backup_dir, path, "a symbolic link")
    if not stat.S_ISREG(status.st_mode):
        raise _damaged(backup_dir, path, "not a regular file")
    if limit is not None and status.st_size > limit:
        raise _damaged(backup_dir, path, f"{status.st_size} bytes")


def _damaged(backup_dir: str, path: str, why: object) -> DamagedBackup:
    lines = str(why).strip().splitlines()
    return DamagedBackup(
        f"model_dir={os.path.dirname(backup_dir)!r}: its backup is damaged ({path}: "
        f"{lines[0] if lines else type(why).__name__}); delete {backup_dir} to start afresh "
        "(the checkpoints/ of each epoch stay), or put back a copy of it."
    )


def say_finished(epochs: int, model_dir: str) -> None:
    """Says on stderr that the run `model_dir` holds finished at epoch `epochs`, so nothing is
    trained."""
    print(
        f"tfdist: already finished at epoch {epochs} in model_dir={model_dir!r}: nothing to "
        f"train (its final state is the model's); pass epochs={epochs + 1} or more to train on "
        "from it, or another model_dir=DIR to start afresh",
        file=sys.stderr,
        flush=True,
    )


def backup_position(backup_dir: str, steps_per_epoch: int) -> tuple[int, int] | None:
    """(epoch, step), both from 0, where training resumes from the backup in `backup_dir`
    (either flavour's), read without a model; None when there is none."""
    latest = latest_backup(backup_dir)
    if latest is None:
        return None
    try:
        saved = dict(tf.train.list_variables(latest))
        if _KERAS3_EPOCHS in saved:
            return counters_position(latest, saved, _KERAS3_EPOCHS)
        if _TF_KERAS_EPOCH in saved:
            return resume_point(
                int(tf.train.load_variable(latest, _TF_KERAS_EPOCH)),
                int(tf.train.load_variable(latest, _TF_KERAS_BATCH)),
                steps_per_epoch,
            )
    except (tf.errors.OpError, ValueError) as error:  # An index or data TensorFlow rejects.
        raise _damaged(backup_dir, latest, error) from None
    return None


def counters_position(checkpoint: str, saved: dict, epochs_name: str) -> tuple[int, int]:
    """(epochs done, steps into the next) of a checkpoint whose counters are `epochs_name` and
    `step_in_epoch` (Keras 3's and `CustomLoop`'s; a step of 0 when it has none), as listed in
    `saved` (`tf.train.list_variables`)."""
    step = int(tf.train.load_variable(checkpoint, _STEP_IN_EPOCH)) if _STEP_IN_EPOCH in saved else 0
    return int(tf.train.load_variable(checkpoint, epochs_name)), step


def resume_point(epoch: int, batch: int, steps_per_epoch: int) -> tuple[int, int]:
    """(epoch, step) where training resumes from a tf-keras backup saved in `epoch` after
    `batch` (both from 0): the next step, or the next epoch's first after the epoch's last
    step or at its end (batch -1)."""
    if epoch < 0:  # Nothing saved yet.
        return 0, 0
    if batch < 0 or batch + 1 >= steps_per_epoch:
        return epoch + 1, 0
    return epoch, batch + 1


def is_finished(
    position: tuple[int, int] | None,
    epochs: int,
    finish: tuple[int, int] | None,
    model_dir: str,
) -> bool:
    """Whether the run in `model_dir` has finished what `--epochs`=`epochs` asks: its history
    records it finished (`finish`: `recorded_finish`) with as many epochs asked or more, and its
    backup (which resumes at `position`: `backup_position`) is that final state. A finished
    run asked for more epochs goes on from its final state.

    Raises:
      ConfigError: a backup that did not finish but has `epochs` epochs done or more (a longer
        run's, stopped); it is kept.
    """
    if finish is not None and position == (finish[0], 0):
        return epochs <= finish[1]
    if position is None or position < (epochs, 0):
        return False
    raise ConfigError(
        f"epochs={epochs}: the backup in model_dir={model_dir!r} has {position[0]} epoch(s) "
        f"done, so nothing is left to train; pass epochs={position[0] + 1} or more to train on "
        "from it, or another model_dir=DIR to start afresh (the backup is kept)."
    )


_KERAS3_EPOCHS = "epochs_done/.ATTRIBUTES/VARIABLE_VALUE"


_STEP_IN_EPOCH = "step_in_epoch/.ATTRIBUTES/VARIABLE_VALUE"


_TF_KERAS_EPOCH = "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"


_TF_KERAS_BATCH = "ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"


def unrestorable(model_dir: str, left: str, path: str, error: Exception) -> ConfigError:
    """The one-line error for a backup or checkpoint at `path` in `model_dir` (`left`: what left
    it) that fails with `error` to restore into this run's model: another model's, or damaged."""
    lines = str(error).strip().splitlines()
    return ConfigError(
        f"model_dir={model_dir!r}: {left} left there cannot be restored into this one "
        f"({lines[0] if lines else type(error).__name__}); resume it with that run's model=MODEL "
        f"and options, or pass another model_dir=DIR (or delete {path})."
    )


_MAX_EPOCHS_RECORDED = 100_000


def _history(path: str) -> tuple[dict[int, dict[str, float]], tuple[int, int] | None] | None:
    """(each epoch's logs, the finish) that earlier attempts recorded at `path`
    (`EpochHistory`); None when there is nothing there tfdist could have written: no record,
    a link, a FIFO, a large file (`read_record`), or JSON of another shape."""
    recorded = read_record(path)
    try:
        epochs = {
            _count(index): {_metric_name(name): _number(value) for name, value in logs.items()}
            for index, logs in recorded["epochs"].items()
        }
        finished = recorded.get("finished")
        finish = (
            None
            if finished is None
            else (_count(finished["epochs_done"]), _count(finished["epochs"]))
        )
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return epochs, finish


def _count(value: object) -> int:
    """`value` as an epoch count or index (a JSON number or, as keys are, a string of digits).

    Raises:
      ValueError: it is not one, or past any run's (`_MAX_EPOCHS_RECORDED`)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(value)
    count = int(value) if isinstance(value, int) or value.isascii() else -1
    if not 0 <= count < _MAX_EPOCHS_RECORDED:
        raise ValueError(value)
    return count


def _metric_name(name: str) -> str:
    """`name` as a metric's name, which lines and JSON show: printable, at most 200 characters
    (a planted record's terminal escapes are not).

    Raises:
      ValueError: it is not one."""
    if not (0 < len(name) <= 200 and name.isprintable()):
        raise ValueError(name)
    return name


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(value)
    return float(value)


def recorded_epochs(path: str) -> dict[int, dict[str, float]]:
    """Each epoch's logs (by epoch, from 0) that earlier attempts recorded at `path`; {} when
    none are (`_history`)."""
    history = _history(path)
    return history[0] if history else {}


def recorded_finish(path: str) -> tuple[int, int] | None:
    """(epochs done, `--epochs`) of the run recorded at `path` as finished; None when it did not
    finish (or went on training after it did). A file there that is not a history tfdist
    wrote is said in one line: it is replaced by this run's."""
    history = _history(path)
    if history is None and storage.isfile(path):
        print(
            f"tfdist: {path} is not a history tfdist wrote (damaged, or another program's); "
            "this run's epochs replace it, and the metrics of earlier attempts are not "
            "in its summary",
            file=sys.stderr,
            flush=True,
        )
    return history[1] if history else None


def by_metric(epochs: dict[int, dict[str, float]]) -> dict[str, list[float | None]]:
    """`epochs`' logs as each metric's value per epoch, from the first epoch on; None where an
    epoch's record is missing."""
    names = {name for logs in epochs.values() for name in logs}
    indices = range(max(epochs, default=-1) + 1)
    return {name: [epochs.get(index, {}).get(name) for index in indices] for name in sorted(names)}
