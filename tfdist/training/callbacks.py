"""Keras callbacks tfdist adds to every fit."""

import os
import sys
import time
from typing import Callable

import tensorflow as tf
import tf_keras

from tfdist.cluster import cost_model
from tfdist.optim import noise_scale
from tfdist.runtime import keras_flavour
from tfdist.runtime import output_files
from tfdist.training import preemption
from tfdist.training.resume import by_metric
from tfdist.training.resume import recorded_epochs
from tfdist.training.resume import resume_point
from tfdist.training.resume import say_resuming
from tfdist.training.resume import unrestorable


class ThroughputTimer(tf_keras.callbacks.Callback):
    """Times each epoch's training steps, validation excluded.

    Runs on the coordinator (parameter server) or on every worker (mirrored strategies).
    """

    def __init__(self, *, global_batch_size: int, steps_per_epoch: int):
        super().__init__()
        self._steps_per_epoch = steps_per_epoch
        self._examples_per_epoch = global_batch_size * steps_per_epoch
        self._epoch_start = 0.0
        self._train_end: float | None = None
        self.epoch_train_s: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.perf_counter()
        self._train_end = None

    def on_test_begin(self, logs=None):
        if self._train_end is None:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        end = self._train_end or time.perf_counter()
        seconds = end - self._epoch_start
        self.epoch_train_s.append(seconds)
        print(
            f"tfdist: epoch {epoch + 1}: {self._examples_per_epoch / seconds:.0f} examples/s, "
            f"{1000 * seconds / self._steps_per_epoch:.1f} ms/step (training steps only)",
            file=sys.stderr,
            flush=True,
        )

    def examples_per_sec(self) -> float:
        """Training examples/s; the first epoch (tracing, warm-up) is left out when there are
        more."""
        timed = self.epoch_train_s[1:] or self.epoch_train_s
        return self._examples_per_epoch * len(timed) / sum(timed)


class Progress(tf_keras.callbacks.Callback):
    """A line during a long epoch, so that a slow run is told from a hung one: the step, the
    rate and the time left in the epoch, every `every_s` seconds (by default TERMINAL_S when
    stderr is a terminal, else LOG_S: quiet in a job's log); none in an epoch shorter than that.

    Reads no logs: tf-keras calls its batch hooks under parameter server too, as each step is
    scheduled. Runs on every training task.
    """

    TERMINAL_S = 10.0
    LOG_S = 60.0

    def __init__(self, *, steps_per_epoch: int, every_s: float | None = None):
        super().__init__()
        self._supports_tf_logs = True
        self._steps_per_epoch = steps_per_epoch
        self._every_s = every_s or (self.TERMINAL_S if sys.stderr.isatty() else self.LOG_S)
        self._epoch = 0
        self._began: tuple[float, int] | None = None  # (time, step) this attempt's epoch began.
        self._next_s = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._began = epoch, None
        self._next_s = time.monotonic() + self._every_s

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if self._began is None:  # After its first step (tracing); a resumed epoch's is later.
            self._began = (now, batch)
        if now < self._next_s or batch == self._began[1]:
            return
        self._next_s = now + self._every_s
        began_s, first = self._began
        rate = (batch - first) / max(now - began_s, 1e-9)
        left = _duration((self._steps_per_epoch - batch - 1) / rate)
        print(
            f"tfdist: epoch {self._epoch + 1}: step {batch + 1} of {self._steps_per_epoch} "
            f"({rate:.1f} steps/s, about {left} left in the epoch)",
            file=sys.stderr,
            flush=True,
        )


def _duration(seconds: float) -> str:
    """`seconds` as "45 s", "12 min" or "3.2 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class NoiseScaleLog(tf_keras.callbacks.Callback):
    """Puts the gradient noise scale measured so far (`tfdist.optim.noise_scale`) into
    each epoch's logs as `noise_scale`, for the callbacks after it (the history and metrics
    JSON, TensorBoard's `epoch_noise_scale`), says it in a log line, and at the end of
    training compares it with the global batch.

    Runs on every worker: under multi-worker mirrored, reading the averages is a collective.
    """

    def __init__(self, read: Callable[[], dict | None], *, global_batch_size: int):
        """`read`: the measurement so far (`NoiseScale.result`); `global_batch_size`: examples
        per update (micro-batches included)."""
        super().__init__()
        self._read = read
        self._global_batch_size = global_batch_size
        self._last: float | None = None

    def on_epoch_end(self, epoch, logs=None):
        measured = self._read()
        if measured is None:
            return
        if measured["noise_scale"] is None:
            print(
                f"tfdist: epoch {epoch + 1}: gradient noise scale not measurable yet (the "
                f"|G|² estimate is {measured['gradient_sq']:.3g}: so far the gradient is all "
                "noise)",
                file=sys.stderr,
                flush=True,
            )
            return
        self._last = measured["noise_scale"]
        if logs is not None:
            logs["noise_scale"] = self._last
        print(
            f"tfdist: epoch {epoch + 1}: gradient noise scale B_simple={self._last:.4g} "
            f"(|G|²={measured['gradient_sq']:.3g}, tr(Σ)={measured['trace']:.3g}; moving "
            f"averages over the last ~{1 / (1 - noise_scale.DECAY):.0f} steps)",
            file=sys.stderr,
            flush=True,
        )

    def on_train_end(self, logs=None):
        if self._last is not None:
            print(
                f"tfdist: {advice(self._last, self._global_batch_size)}",
                file=sys.stderr,
                flush=True,
            )


def advice(noise_scale: float, global_batch_size: int) -> str:
    """What the last noise scale says about scaling this job's global batch, by the rule
    `tfdist plan --noise_scale_json` applies (`tfdist.cluster.cost_model`): B_simple stands for
    the critical batch, and a doubling of the batch pays while it saves at least a quarter of the
    steps to the same target."""
    cut = cost_model.doubling_cut(global_batch_size, noise_scale)
    said = (
        f"the gradient noise scale ends at B_simple={noise_scale:.0f} examples (an estimate "
        f"of this job's critical batch); it trains with a global batch of {global_batch_size}"
    )
    if cut >= cost_model.PAYING_CUT:
        return (
            f"{said}: doubling the global batch (more replicas or a larger per-replica "
            f"batch) should still save about {cut:.0%} of the steps to the same target."
        )
    return (
        f"{said}: past it, doubling the batch saves only about {cut:.0%} of the steps; more "
        "replicas would mostly add cost (`tfdist plan --noise_scale_json` says where)."
    )


class BackupAndRestore(tf_keras.callbacks.BackupAndRestore):
    """tf-keras' backup and restore, under OneDeviceStrategy too, resuming at the step a
    preemption saved (`save_at`), with its saves timed by `clock` (`preemption.SaveClock`), and
    kept at the end with the final state (tf-keras deletes it): a rerun of the finished run knows it
    is done, and a longer `--epochs` goes on from there.

    tf-keras 2.21 refuses OneDeviceStrategy in `on_train_begin` (it is missing from the private
    `_supported_strategies`), though the backup needs nothing that strategy lacks: a one_device
    run killed in epoch 2 resumes there (tests/tfdist/training/test_callbacks.py). The private
    attribute is extended only for the tf-keras release where that was checked.
    """

    def __init__(
        self, backup_dir: str, clock: preemption.SaveClock, save_freq: str | int = "epoch"
    ):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=False)
        self.clock = clock

    def on_train_begin(self, logs=None):
        if isinstance(self.model.distribute_strategy, tf.distribute.OneDeviceStrategy):
            keras_flavour.require_checked_tf_keras(
                "model_dir under strategy=one_device", "use --strategy=mirrored"
            )
            self._supported_strategies = (
                *self._supported_strategies,
                tf.distribute.OneDeviceStrategy,
            )
        try:
            super().on_train_begin(logs)
        except (ValueError, tf.errors.OpError) as error:  # Another model's, or damaged.
            raise unrestorable(
                os.path.dirname(self.backup_dir),
                "the backup an interrupted run",
                self.backup_dir,
                error,
            ) from None
        # Where `fit` starts: tf-keras reads the step only from backups made every N steps.
        self._training_state.maybe_load_initial_counters_from_ckpt = self._resume_point

    def on_train_end(self, logs=None):
        """Keeps the final state as the backup: the last epoch's backup, or one made now when
        backups come every N steps."""
        self.save_at(self._current_epoch, None)
        super().on_train_end(logs)

    def _resume_point(self, steps_per_epoch, initial_epoch, mode=None):
        del initial_epoch, mode  # `fit` asks only when it trains, from epoch 0.
        state = self._training_state
        return resume_point(
            int(state._ckpt_saved_epoch.numpy()),  # pylint: disable=protected-access
            int(state._ckpt_saved_batch.numpy()),  # pylint: disable=protected-access
            steps_per_epoch,
        )

    def save_at(self, epoch: int, batch: int | None) -> None:
        """Backs up the training state now, as saved in `epoch` after `batch` (None: at the
        epoch's end, which a backup every epoch has saved already); a save cut short leaves the
        last complete backup."""
        if batch is None and self.save_freq == "epoch":
            return
        state = self._training_state
        state._ckpt_saved_epoch.assign(epoch)  # pylint: disable=protected-access
        state._ckpt_saved_batch.assign(-1 if batch is None else batch)  # pylint: disable=protected-access
        self._backup(epoch)

    def _backup(self, epoch, batch=0):
        """Keras' backup, timed: what a preemption's grace must cover."""
        self.clock.timed(lambda: super(BackupAndRestore, self)._backup(epoch, batch))


class BoundedSteps(tf_keras.callbacks.Callback):
    """Brackets each training and validation call of `fit` with `deadline` (a
    `strategies.CollectiveDeadline`). Goes first among the callbacks, so that the others'
    work after a call (a backup, a notice's save) is not counted in it.

    Runs on every multi-worker task with `--collective_timeout_s`."""

    def __init__(self, deadline):
        super().__init__()
        self._supports_tf_logs = True  # Reads no logs.
        self._deadline = deadline

    def on_train_batch_begin(self, batch, logs=None):
        self._deadline.started("train")

    def on_test_batch_begin(self, batch, logs=None):
        self._deadline.started("test")

    def on_train_batch_end(self, batch, logs=None):
        self._deadline.ended()

    on_test_batch_end = on_train_batch_end


class SaveOnNotice(tf_keras.callbacks.Callback):
    """Ends `fit` at a step boundary after a preemption notice (`tfdist.training.preemption`),
    with `backup` saved there, by raising `errors.Preempted`. After the epoch's last step the
    epoch ends first (validation, its checkpoint and history), as does a notice in validation
    where the step loop is one process's; at the last epoch's end the run is done and ends as
    usual. Goes last among the callbacks.

    Under parameter server a step ends, for `fit`, when the coordinator has scheduled it: the
    coordinator is joined first, so every step scheduled before the stop has run on the workers
    when the state is saved, and the steps scheduled ahead are kept few (`Watch.scheduled`).
    tf-keras allows its batch hooks there because it takes no logs."""

    def __init__(
        self, watch: preemption.Watch, backup: BackupAndRestore | None, *, steps_per_epoch: int
    ):
        super().__init__()
        self._supports_tf_logs = True  # Reads no logs: tf-keras then allows it under PS.
        self._watch, self._backup = watch, backup
        self._steps_per_epoch = steps_per_epoch
        self._epoch = 0
        self._after_epoch = False

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self._watch.before_step()

    def on_train_batch_end(self, batch, logs=None):
        coordinator = getattr(self.model, "_cluster_coordinator", None)  # Parameter server's.
        if coordinator is not None:
            self._watch.scheduled(coordinator)
        if not self._watch.stop_agreed():
            return
        if coordinator is not None:
            coordinator.join()
        if batch + 1 < self._steps_per_epoch:
            raise self._stop(batch)
        self._after_epoch = True

    def on_epoch_end(self, epoch, logs=None):
        last = epoch + 1 == self.params["epochs"]  # Then the run is done: it ends as usual.
        if not last and (self._after_epoch or self._watch.stops_at_epoch_end()):
            raise self._stop(None)

    def _stop(self, batch: int | None) -> Exception:
        backup = self._backup
        return preemption.stopped(
            self._epoch,
            batch,
            backup and (lambda: backup.save_at(self._epoch, batch)),
            backup and os.path.dirname(backup.backup_dir),
        )


class EpochHistory(tf_keras.callbacks.Callback):
    """Every epoch's logs, across restarts: a resumed fit starts at a later epoch, so the epochs
    before it come from the file earlier attempts wrote (`path`, written by the chief only), and
    at the end of training the fact that the run finished (`recorded_finish`).

    Attributes:
      resumed_from_epoch: the first epoch (from 0) this attempt ran, when it is not 0.
    """

    def __init__(
        self,
        path: str | None,
        *,
        writes: bool,
        epochs: int,
        start: tuple[int, int] | None = None,
    ):
        """`epochs`: the run's `--epochs`; `start`: the (epoch, step), from 0, where training
        starts, when known beforehand (`backup_position`); else the first epoch that begins."""
        super().__init__()
        self._path, self._writes, self._start = path, writes, start
        self._epochs_asked = epochs
        self._epochs: dict[int, dict[str, float]] = {}
        self.resumed_from_epoch: int | None = None

    def on_epoch_begin(self, epoch, logs=None):
        first, step = self._start or (epoch, 0)
        if self.resumed_from_epoch is not None or self._epochs or (first, step) == (0, 0):
            return
        self.resumed_from_epoch = first
        self._epochs = {index: logs for index, logs in self._earlier().items() if index < first}
        say_resuming(first + 1, "the backup an earlier run", step + 1)

    def on_epoch_end(self, epoch, logs=None):
        self._epochs[epoch] = {name: float(value) for name, value in (logs or {}).items()}
        self._write()

    def on_train_end(self, logs=None):
        """The run finished (all its epochs, or fewer when a callback stopped it)."""
        done = max(self._epochs, default=-1) + 1
        self._write(finished={"epochs_done": done, "epochs": self._epochs_asked})

    def _write(self, **fields) -> None:
        if self._path and self._writes:
            epochs = {str(index): values for index, values in sorted(self._epochs.items())}
            output_files.write_record(self._path, {"epochs": epochs, **fields})

    def _earlier(self) -> dict[int, dict[str, float]]:
        return recorded_epochs(self._path) if self._path else {}

    def history(self) -> dict[str, list[float | None]]:
        """Each metric's value per epoch, from the first epoch on; None where an earlier
        attempt's record is missing."""
        return by_metric(self._epochs)
