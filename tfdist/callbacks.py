"""Keras callbacks tfdist adds to every fit."""

import sys
import time

import tf_keras


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
        print(f"tfdist: epoch {epoch + 1}: {self._examples_per_epoch / seconds:.0f} examples/s, "
              f"{1000 * seconds / self._steps_per_epoch:.1f} ms/step (training steps only)",
              file=sys.stderr, flush=True)

    def examples_per_sec(self) -> float:
        """Training examples/s; the first epoch (tracing, warm-up) is left out when there are more."""
        timed = self.epoch_train_s[1:] or self.epoch_train_s
        return self._examples_per_epoch * len(timed) / sum(timed)
