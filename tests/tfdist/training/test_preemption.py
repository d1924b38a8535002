"""Save on notice (`tfdist.training.preemption`): a SIGTERM mid-epoch ends the run at one step
with its state saved and exit 75, and the restart ends with the weights of a run never
interrupted (`--deterministic`): on one device in Keras 3, on 2 CPU replicas (mirrored) and on 2
workers under `tfdist launch` in tf-keras. A parameter-server chief saves at its step and the
job resumes at the next; a SIGKILL in the middle of a save leaves the last complete backup to
resume from. (CustomLoop: tests/tfdist/training/keras2/test_custom_loop.py; a rehearsal's
deleted pod: test_rehearse.py; real Slurm's `scancel --signal`: test_slurm_cluster.py.)

The runs are a user's own program (tests/data/programs/mlp_with_digest.py) that sends itself
SIGTERM at a given step, so the notice lands at the same step every time.
"""

import contextlib
import functools
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

import pytest

import keras
import tensorflow as tf
import tf_keras
import tfdist
from tests.leaving import Left
from tests.tfdist.cli_runner import MLP_PROGRAM
from tests.tfdist.training.keras3.keras3_tabular import keras3_tabular_model
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tfdist import errors
from tests.tfdist.cli_runner import digests
from tfdist.errors import EXIT_PREEMPTED
from tfdist.runtime import notice
from tfdist.runtime.output_files import OutputFileError
from tfdist.training.callbacks import SaveOnNotice
from tfdist.training import preemption
from tfdist.training import resume
from tfdist.strategies import StrategyKind

_TFDIST = [sys.executable, "-m", "tfdist"]
_REPO = str(pathlib.Path(__file__).parents[3])
# One run's bound: a few seconds of training after TensorFlow's import, a launch of three
# attempts at most (about 30 s on the quiet machine, 60 s beside two CPU-bound processes); only a
# hang reaches it.
_RUN_S = 420
_FLAGS = ["--epochs=3", "--deterministic"]  # 4 steps an epoch.
_PREEMPTED = (
    r"mlp_with_digest\.py: preempted at epoch 2 step 2; state saved in [0-9.]+ s under "
    r"--model_dir='.*'; start the same command again to resume there\."
)


def _run(command: list[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=_RUN_S, check=False
    )


class StoppedTest(PolicyReset):
    def test_without_a_model_dir_the_line_says_nothing_was_saved(self):
        line = str(preemption.stopped(1, 36, None, None))
        self.assertEqual(
            line,
            "preempted at epoch 2 step 37; nothing saved (no --model_dir): pass model_dir=DIR "
            "so that a preempted run resumes where it stopped.",
        )

    def test_it_saves_once_then_the_signals_are_ignored(self):
        for step, where in ((36, "epoch 2 step 37"), (None, "the end of epoch 2")):
            with self.subTest(step=step):
                run = notice.install()
                run.training()
                phases = []  # The run's phase at each save.
                line = str(preemption.stopped(1, step, lambda: phases.append(run.phase), "md"))
                self.assertEqual(phases, [notice.Phase.TRAINING])
                self.assertRegex(
                    line,
                    rf"^preempted at {where}; state saved in [0-9]+\.[0-9]{{2}} s under "
                    r"model_dir='md'; start the same command again to resume there\.$",
                )
                self.assertIs(run.phase, notice.Phase.LEAVING)
                self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_IGN)


class _WithAnotherWorker:
    """A replica context whose all-reduce also adds the flag of a worker outside this process
    (`flag` 1.0: that worker raised its own), as multi_worker_mirrored's sums every worker's."""

    def __init__(self, context: tf.distribute.ReplicaContext, flag: float):
        self._context, self._flag = context, flag

    def all_reduce(self, reduce_op, value):
        return self._context.all_reduce(reduce_op, value) + self._flag


@functools.cache
def _mirrored() -> tf.distribute.MirroredStrategy:
    """2 replicas reducing through one device, not collectives: strategies built in one process
    number their collectives from the same keys, and another test's of another shape would
    abort."""
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


class AgreementTest(PolicyReset):
    """The agreed step (`Agreement`, and a `Watch` with one) under mirrored over the session's 2
    CPU replicas in this process; a worker in another process stands beside them in the
    all-reduce where a test says so."""

    def _step(self, replica_step, other_workers_flag: float | None = None):
        """Runs `replica_step(3.0)` once on both replicas in a `tf.function`, with another
        worker's flag added to the all-reduce when `other_workers_flag` is given; returns each
        replica's result."""
        strategy = _mirrored()

        @tf.function
        def step():
            return strategy.run(replica_step, args=(tf.constant(3.0),))

        with contextlib.ExitStack() as stack:
            if other_workers_flag is not None:
                context = tf.distribute.get_replica_context
                stack.enter_context(
                    mock.patch.object(
                        tf.distribute,
                        "get_replica_context",
                        lambda: _WithAnotherWorker(context(), other_workers_flag),
                    )
                )
            return [float(value) for value in strategy.experimental_local_results(step())]

    def test_a_flag_raised_before_a_step_is_agreed_at_that_step(self):
        agreement = preemption.Agreement()
        step = agreement.around(lambda value: value * 2.0)
        self.assertEqual(self._step(step), [6.0, 6.0], "the step's own results")
        self.assertFalse(agreement.agreed, "no flag raised")
        agreement.raise_flag()
        self.assertFalse(agreement.agreed, "not before a step all-reduces it")
        self._step(step)
        self.assertTrue(agreement.agreed)
        self._step(step)
        self.assertTrue(agreement.agreed, "a raised flag stays raised")

    def test_a_flag_only_another_worker_raised_is_agreed_here_too(self):
        for flag, agreed in ((1.0, True), (0.0, False)):
            with self.subTest(other_workers_flag=flag):
                agreement = preemption.Agreement()
                self._step(agreement.around(lambda value: value), other_workers_flag=flag)
                self.assertIs(agreement.agreed, agreed)

    def test_a_watch_with_an_agreement_stops_at_the_step_after_the_notice(self):
        run = notice.install()
        run.training()
        watch = preemption.Watch(run, preemption.Agreement())
        step = watch.around(lambda value: value)
        watch.before_step()
        self._step(step)
        self.assertFalse(watch.stop_agreed(), "no notice")
        os.kill(os.getpid(), signal.SIGTERM)
        self.assertFalse(watch.stop_agreed(), "not before a step all-reduces it")
        self.assertFalse(watch.stops_at_epoch_end(), "workers agree only in a step")
        watch.before_step()
        self._step(step)
        self.assertTrue(watch.stop_agreed())

    def test_tf_keras_fit_raises_the_flag_as_a_step_begins_and_stops_after_it(self):
        """`SaveOnNotice`, as multi_worker_mirrored's `fit` calls it around a step (no
        --model_dir: nothing to save)."""
        run = notice.install()
        run.training()
        watch = preemption.Watch(run, preemption.Agreement())
        stop = SaveOnNotice(watch, None, steps_per_epoch=4)
        step = watch.around(lambda value: value)
        stop.on_epoch_begin(1)
        os.kill(os.getpid(), signal.SIGTERM)
        stop.on_train_batch_begin(0)
        self._step(step)
        with self.assertRaisesRegex(errors.Preempted, r"^preempted at epoch 2 step 1; nothing "):
            stop.on_train_batch_end(0)


class WatchOfAPlanTest(unittest.TestCase):
    """`preemption.watch` for each kind of run: where a notice stops it (`Watch`'s view)."""

    def _plan(self, kind: StrategyKind, num_workers: int, model_dir=None) -> types.SimpleNamespace:
        return types.SimpleNamespace(kind=kind, num_workers=num_workers, model_dir=model_dir)

    def test_only_several_multi_worker_mirrored_workers_agree_in_a_step(self):
        for kind, num_workers, agree in (
            (StrategyKind.MULTI_WORKER_MIRRORED, 2, True),
            (StrategyKind.MULTI_WORKER_MIRRORED, 1, False),
            (StrategyKind.MIRRORED, 1, False),
        ):
            with self.subTest(kind=kind, num_workers=num_workers):
                run = notice.install()
                run.training()
                watch = preemption.watch(self._plan(kind, num_workers))
                os.kill(os.getpid(), signal.SIGTERM)
                # One process stops at once, also in validation; workers at a step's all-reduce.
                self.assertIs(watch.stop_agreed(), not agree)
                self.assertIs(watch.stops_at_epoch_end(), not agree)

    def test_a_parameter_server_chief_clears_an_earlier_runs_ps_notices(self):
        root = tempfile.TemporaryDirectory()
        self.addCleanup(root.cleanup)
        notices_dir = os.path.join(root.name, "notices")
        preemption.PsNotices.leave(notices_dir, "ps:0")  # An earlier run's.
        notice.install().training()
        watch = preemption.watch(
            self._plan(StrategyKind.PARAMETER_SERVER, 2, types.SimpleNamespace(notices=notices_dir))
        )
        self.assertFalse(watch.stop_agreed())
        preemption.PsNotices.leave(notices_dir, "ps:1")
        with mock.patch.object(preemption.PsNotices, "POLL_S", 0.0):
            self.assertTrue(watch.stop_agreed())
        coordinator = mock.Mock()
        for _ in range(32):
            watch.scheduled(coordinator)
        coordinator.join.assert_called_once_with()  # After 16 calls a worker.


def backup_position_of(model_dir: str) -> tuple[int, int] | None:
    return resume.backup_position(os.path.join(model_dir, "backup"), 4)


def fit_tabular(model_dir: str, callbacks=()) -> dict:
    """`tfdist.fit` of the tabular model, 3 epochs of 4 steps with validation, under
    `model_dir` (also run by `KilledMidSaveTest`'s child process)."""
    plan = tfdist.setup(
        run_config(
            global_batch_size=32,
            epochs=3,
            steps_per_epoch=4,
            validation_steps=2,
            model_dir=model_dir,
        )
    )
    tf_keras.utils.set_random_seed(3)
    return tfdist.fit(
        plan,
        tabular_model,
        tabular_dataset_fn(32),
        validation_data=tabular_dataset_fn(32, training=False),
        loss="sparse_categorical_crossentropy",
        callbacks=list(callbacks),
    )


class NoticeInFitTest(PolicyReset):
    """A notice at each boundary of `fit` in this process (the test runs in its process's main
    thread, where `setup` installs the handler): the first step, validation (and a second notice
    during the save), the epoch's backup, a resumed run's start, the last step. (Before set-up,
    between set-up and the first step, and after the run: PreemptedRunTest, in processes.)"""

    def _preempted(self, model_dir: str, callback, line: str) -> None:
        with self.assertRaisesRegex(errors.Preempted, rf"^preempted at {line}; state saved in "):
            fit_tabular(model_dir, [callback])

    def test_a_notice_in_the_first_step_or_a_resumed_runs_start_saves_at_that_step(self):
        class SignalInTheFirstStep(tf_keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if self.model.optimizer.iterations.numpy() == 0:
                    os.kill(os.getpid(), signal.SIGTERM)

        class SignalAsTheRunResumes(tf_keras.callbacks.Callback):
            def on_train_begin(self, logs=None):  # Before the backup's restore, which comes
                os.kill(os.getpid(), signal.SIGTERM)  # in a callback of tfdist's after yours.

        model_dir = os.path.join(self.get_temp_dir(), "first")
        self._preempted(model_dir, SignalInTheFirstStep(), "epoch 1 step 1")
        self.assertEqual(backup_position_of(model_dir), (0, 1))
        self._preempted(model_dir, SignalAsTheRunResumes(), "epoch 1 step 2")
        self.assertEqual(backup_position_of(model_dir), (0, 2), "one step of the resumed run")

    def test_a_notice_during_the_epochs_backup_ends_the_run_at_the_epochs_end(self):
        signalled = []
        save = tf.train.CheckpointManager.save

        def save_signalled(manager, *args, **kwargs):  # The notice mid-save, once.
            if not signalled:
                signalled.append(True)
                os.kill(os.getpid(), signal.SIGTERM)
            return save(manager, *args, **kwargs)

        model_dir = os.path.join(self.get_temp_dir(), "backup")
        with mock.patch.object(tf.train.CheckpointManager, "save", save_signalled):
            with self.assertRaisesRegex(
                errors.Preempted, r"^preempted at the end of epoch 1; state saved in "
            ):
                fit_tabular(model_dir)
        self.assertEqual(backup_position_of(model_dir), (1, 0), "the epoch's backup, whole")

    def test_a_notice_in_the_last_step_lets_the_run_finish_then_leaves_with_0(self):
        class SignalInTheLastStep(tf_keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if self.model.optimizer.iterations.numpy() == 11:  # Step 4 of epoch 3 of 3.
                    os.kill(os.getpid(), signal.SIGTERM)

        model_dir = os.path.join(self.get_temp_dir(), "done")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(Left) as left:
            fit_tabular(model_dir, [SignalInTheLastStep()])  # Not errors.Preempted.
        self.assertEqual(left.exception.status, 0)
        self.assertIn("(SIGTERM) came after the run finished at epoch 3", stderr.getvalue())
        with open(os.path.join(model_dir, "history.json"), encoding="utf-8") as history:
            recorded = json.load(history)
        self.assertEqual(len(recorded["epochs"]), 3)
        self.assertEqual(recorded["finished"], {"epochs_done": 3, "epochs": 3})
        self.assertEqual(backup_position_of(model_dir), (3, 0), "the final state, kept")

    def test_a_notice_in_validation_ends_the_epoch_and_a_second_in_the_save_changes_nothing(self):
        signalled = []

        class SignalInValidation(tf_keras.callbacks.Callback):
            def on_test_begin(self, logs=None):
                if self.model.optimizer.iterations.numpy() == 8:  # Epoch 2's validation.
                    signalled.append(True)
                    os.kill(os.getpid(), signal.SIGTERM)

        save = tf.train.CheckpointManager.save

        def save_signalled(manager, *args, **kwargs):  # A second notice mid-save.
            if signalled:
                os.kill(os.getpid(), signal.SIGTERM)
            return save(manager, *args, **kwargs)

        model_dir = os.path.join(self.get_temp_dir(), "preempted")
        with (
            mock.patch.object(tf.train.CheckpointManager, "save", save_signalled),
            self.assertRaisesRegex(
                errors.Preempted, r"^preempted at the end of epoch 2; state saved in "
            ),
        ):
            fit_tabular(model_dir, [SignalInValidation()])
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            resumed = fit_tabular(model_dir)
        self.assertIn("tfdist: resuming at epoch 3 from the backup", stderr.getvalue())
        whole = fit_tabular(os.path.join(self.get_temp_dir(), "whole"))
        self.assertEqual(resumed["final"], whole["final"])
        self.assertEqual(resumed["history"], whole["history"])


def signal_before_step(steps: int, keras_module=tf_keras):
    """A callback of `keras_module` (tf_keras or Keras 3) that sends this process SIGTERM as the
    step after `steps` optimizer steps begins."""

    class SignalBeforeStep(keras_module.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == steps:
                os.kill(os.getpid(), signal.SIGTERM)

    return SignalBeforeStep()


def fit_two_epochs(
    model_dir: str, callbacks=(), *, keras_version=2, strategy=None, backup_every="epoch"
):
    """`tfdist.fit` of the tabular model in `keras_version`, 2 epochs of 4 steps without
    validation."""
    plan = tfdist.setup(
        run_config(
            global_batch_size=32,
            strategy=strategy,
            keras=keras_version,
            epochs=2,
            steps_per_epoch=4,
            model_dir=model_dir,
            backup_every=backup_every,
        )
    )
    keras_module = keras if keras_version == 3 else tf_keras
    keras_module.utils.set_random_seed(3)
    return tfdist.fit(
        plan,
        keras3_tabular_model if keras_version == 3 else tabular_model,
        tabular_dataset_fn(32),
        loss="sparse_categorical_crossentropy",
        callbacks=list(callbacks),
    )


class SaveAtTheStepTest(PolicyReset):
    """tf-keras' `fit` in this process, preempted mid-epoch: the backup holds the step it
    stopped at, and the run resumes at the next (tfdist.training.callbacks)."""

    def test_a_notice_mid_epoch_saves_that_step_and_the_run_resumes_at_the_next(self):
        model_dir = os.path.join(self.get_temp_dir(), "preempted")
        with self.assertRaisesRegex(
            errors.Preempted, r"^preempted at epoch 2 step 2; state saved in "
        ):
            fit_two_epochs(model_dir, [signal_before_step(5)])
        self.assertEqual(backup_position_of(model_dir), (1, 2))
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            resumed = fit_two_epochs(model_dir)
        self.assertIn("tfdist: resuming at epoch 2 step 3 from the backup", stderr.getvalue())
        self.assertEqual(int(resumed.model.optimizer.iterations.numpy()), 8, "6 saved, 2 more")

    def test_backups_every_few_steps_keep_the_final_state(self):
        model_dir = os.path.join(self.get_temp_dir(), "steps")
        fit_two_epochs(model_dir, backup_every="3")  # The last step backup: after step 6.
        self.assertEqual(backup_position_of(model_dir), (2, 0))


class Keras3SaveAtTheStepTest(PolicyReset):
    """tfdist's Keras 3 loop in this process, preempted: the backup holds the step it stopped
    at, and the run resumes at the next (tfdist.training.keras3.fit)."""

    def tearDown(self):
        keras.mixed_precision.set_global_policy("float32")
        super().tearDown()

    def test_a_notice_mid_epoch_saves_that_step_and_the_run_resumes_at_the_next(self):
        model_dir = os.path.join(self.get_temp_dir(), "preempted")
        with self.assertRaisesRegex(
            errors.Preempted, r"^preempted at epoch 2 step 2; state saved in "
        ):
            fit_two_epochs(model_dir, [signal_before_step(5, keras)], keras_version=3)
        self.assertEqual(backup_position_of(model_dir), (1, 2))
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            resumed = fit_two_epochs(model_dir, keras_version=3)
        self.assertIn("tfdist: resuming at epoch 2 step 3 from the backup", stderr.getvalue())
        self.assertEqual(int(resumed.model.optimizer.iterations.numpy()), 8, "6 saved, 2 more")

    def test_workers_agreeing_in_an_epochs_last_step_stop_at_its_end(self):
        """As multi_worker_mirrored's workers agree (`preemption.Agreement`), here over the 2
        replicas of mirrored: a notice in the last step of epoch 1 ends the run at that
        epoch's end, its backup saved there."""
        model_dir = os.path.join(self.get_temp_dir(), "agreed")
        with (
            mock.patch.object(
                preemption,
                "watch",
                lambda plan: preemption.Watch(notice.current(), preemption.Agreement()),
            ),
            self.assertRaisesRegex(
                errors.Preempted, r"^preempted at the end of epoch 1; state saved in "
            ),
        ):
            fit_two_epochs(
                model_dir, [signal_before_step(3, keras)], keras_version=3, strategy=MIRRORED
            )
        self.assertEqual(backup_position_of(model_dir), (1, 0))


# A child process preempted at epoch 2 step 2 that dies by SIGKILL in the middle of that save:
# its shards are written, the checkpoint not yet assembled from them nor named the latest.
_KILLED_MID_SAVE = """
import os, signal, sys
import tf_keras
from tensorflow.python.ops import gen_io_ops
from tests.tfdist.training.test_preemption import fit_tabular

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

class SignalThenKillInTheSave(tf_keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if self.model.optimizer.iterations.numpy() == 5:
            gen_io_ops.merge_v2_checkpoints = killed
            os.kill(os.getpid(), signal.SIGTERM)

fit_tabular(sys.argv[1], [SignalThenKillInTheSave()])
"""


@pytest.mark.multiprocess
class KilledMidSaveTest(PolicyReset):
    def test_a_save_cut_short_by_sigkill_leaves_the_last_complete_backup_to_resume(self):
        """The grace ran out during the preemption's save (SIGKILL, as Kubernetes sends): the
        restart resumes from the epoch-1 backup as though the save never began, and ends as a
        run never interrupted ends."""
        model_dir = os.path.join(self.get_temp_dir(), "killed")
        killed = _run([sys.executable, "-c", _KILLED_MID_SAVE, model_dir], _REPO)
        self.assertEqual(killed.returncode, -signal.SIGKILL, killed.stderr[-2000:])
        backup = os.path.join(model_dir, "backup", "chief")
        self.assertIn("ckpt-2_temp", os.listdir(backup), "the save's shards, left half-done")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            resumed = fit_tabular(model_dir)
        self.assertIn("tfdist: resuming at epoch 2 from the backup", stderr.getvalue())
        whole = fit_tabular(os.path.join(self.get_temp_dir(), "whole"))
        self.assertEqual(resumed["final"], whole["final"])
        self.assertEqual(resumed["history"], whole["history"])


# A SIGTERM that TensorFlow's multi-worker runtime catches after the strategy's build, as it does
# while the workers join: `reclaim` takes the signals back and finds the notice TensorFlow holds.
_HELD_BY_TENSORFLOW = """
import json, os, signal, time
import portpicker
port = portpicker.pick_unused_port()
os.environ["TF_CONFIG"] = json.dumps(
    {"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}}
)
from tfdist.runtime import notice
run = notice.install()
from tfdist.runtime.tf_import import import_tensorflow
import_tensorflow(show_logs=False)
import tensorflow as tf
tf.distribute.MultiWorkerMirroredStrategy()
os.kill(os.getpid(), signal.SIGTERM)  # TensorFlow's handler takes it.
time.sleep(0.2)
print("still running", flush=True)
run.reclaim()  # Too soon for TensorFlow to say: it looks at its flag every second.
run.training()  # Waits out that second: the step loop will save at its first step.
print("noted", run.signal_name, flush=True)
"""


@pytest.mark.multiprocess
class HeldByTensorFlowTest(unittest.TestCase):
    def test_a_sigterm_tensorflow_caught_before_the_signals_came_back_is_the_runs_notice(self):
        held = _run([sys.executable, "-c", _HELD_BY_TENSORFLOW], _REPO)
        self.assertEqual(held.returncode, 0, held.stderr[-2000:])
        self.assertEqual(held.stdout, "still running\nnoted SIGTERM\n")


# An error reported as `tfdist.run` and the CLI report it, with a teardown that prints.
_REPORTED = """
import atexit, sys
from tfdist import errors
from tfdist.commands import app
atexit.register(print, "torn down")
error = (errors.Preempted if sys.argv[1] == "preempted" else errors.UsageError)(sys.argv[1])
sys.exit(app.report(error))
"""


@pytest.mark.multiprocess
class LeavesAtOnceTest(unittest.TestCase):
    def test_a_preempted_process_leaves_without_the_teardown_that_can_outlast_its_grace(self):
        for error, status, line, teardown in (
            ("preempted", EXIT_PREEMPTED, "-c: preempted\n", ""),
            ("usage", 2, "-c: error: usage\n", "torn down\n"),
        ):
            with self.subTest(error=error):
                reported = _run([sys.executable, "-c", _REPORTED, error], _REPO)
                self.assertEqual(reported.returncode, status, reported.stderr)
                self.assertEqual(reported.stderr, line)
                self.assertEqual(reported.stdout, teardown)


class PsNoticesTest(unittest.TestCase):
    def test_a_ps_tasks_notice_stops_the_chief_and_a_new_run_clears_it(self):
        notices_dir = os.path.join(tempfile.mkdtemp(), "notices")
        chief_notice = notice.Notice()
        ps_notices = preemption.PsNotices(notices_dir)
        watch = preemption.Watch(chief_notice, ps_notices=ps_notices)
        self.assertFalse(watch.stop_agreed())
        preemption.PsNotices.leave(notices_dir, "ps:1")
        with mock.patch.object(preemption.PsNotices, "POLL_S", 3600.0):
            self.assertFalse(watch.stop_agreed(), "looked for at most every POLL_S")
        with mock.patch.object(preemption.PsNotices, "POLL_S", 0.0):
            self.assertTrue(watch.stop_agreed())
            self.assertEqual(ps_notices.from_task, "ps:1")
            self.assertFalse(watch.stops_at_epoch_end(), "a step ends it, not validation")
            again = preemption.PsNotices(notices_dir)
            again.clear()
            self.assertFalse(again.received)
            again.clear()  # Nothing to clear.

    def test_a_notice_is_never_left_through_a_link_planted_at_its_path(self):
        scratch = self.enterContext(tempfile.TemporaryDirectory())
        victim, notices_dir = os.path.join(scratch, "victim"), os.path.join(scratch, "notices")
        with open(victim, "w", encoding="utf-8") as file:
            file.write("kept")
        os.makedirs(notices_dir)
        os.symlink(victim, os.path.join(notices_dir, "ps:0"))
        with self.assertRaisesRegex(OutputFileError, "is a symbolic link, which tfdist never"):
            preemption.PsNotices.leave(notices_dir, "ps:0")
        with open(victim, encoding="utf-8") as file:
            self.assertEqual(file.read(), "kept")


class ScheduledAheadTest(unittest.TestCase):
    def test_a_chief_joins_its_coordinator_every_16_calls_a_worker(self):
        scheduled, joined_after = [], []
        coordinator = mock.Mock()
        coordinator.join.side_effect = lambda: joined_after.append(len(scheduled))
        watch = preemption.Watch(notice.Notice(), ahead=preemption.ScheduledAhead(2))
        for call in range(70):
            scheduled.append(call)
            watch.scheduled(coordinator)
        self.assertEqual(joined_after, [32, 64])
        preemption.Watch(notice.Notice()).scheduled(coordinator)  # Not parameter server.
        self.assertEqual(coordinator.join.call_count, 2)


class SaveClockTest(unittest.TestCase):
    """The first backup's save against the engine's grace, and the slowest save of every
    attempt (a preemption's save included) at the run's end."""

    def _clock(self, root: str, grace_s: float | None) -> preemption.SaveClock:
        plan = types.SimpleNamespace(
            config=types.SimpleNamespace(train=types.SimpleNamespace(grace_s=grace_s)),
            model_dir=types.SimpleNamespace(save_time_json=os.path.join(root, "save_time.json")),
            writes_results=True,
        )
        return preemption.SaveClock(plan)

    def _timed(self, clock: preemption.SaveClock, seconds: float) -> str:
        """stderr of a save that takes `seconds` on a fake clock."""
        now = iter([0.0, seconds])  # Exact: no sum to round.
        stderr = io.StringIO()
        with (
            mock.patch.object(preemption.time, "perf_counter", lambda: next(now)),
            contextlib.redirect_stderr(stderr),
        ):
            self.assertEqual(clock.timed(lambda: None), seconds)
        return stderr.getvalue()

    def test_the_first_save_says_whether_the_grace_covers_it(self):
        with tempfile.TemporaryDirectory() as root:
            self.assertEqual(
                self._timed(self._clock(root, 30.0), 1.25),
                "tfdist: a backup save takes 1.25 s: the grace period of 30 s this task's "
                "engine gives (TFDIST_GRACE_S) covers it\n",
            )
            self.assertIn(
                "a backup save takes 2.50 s: past the grace period of 2 s this task's engine "
                "gives (TFDIST_GRACE_S): a preemption would lose the steps since the last "
                "complete backup; give the job a longer grace",
                self._timed(self._clock(root, 2.0), 2.5),
            )
            unknown = self._clock(root, None)
            self.assertIn("set TFDIST_GRACE_S=S to have it checked", self._timed(unknown, 0.5))
            self.assertEqual(self._timed(unknown, 0.5), "", "only the first save says so")

    def test_the_slowest_save_of_every_attempt_is_kept_across_restarts(self):
        with tempfile.TemporaryDirectory() as root:
            first = self._clock(root, 30.0)
            self._timed(first, 2.63)  # Say, the preemption's save, as the attempt ended.
            resumed = self._clock(root, 30.0)
            self.assertEqual(resumed.slowest_s, 2.63)
            self._timed(resumed, 1.68)
            self.assertEqual(resumed.slowest_s, 2.63)
            self._timed(resumed, 3.0)
            self.assertEqual(self._clock(root, 30.0).slowest_s, 3.0)

    def test_a_recorded_save_that_is_not_a_time_is_none(self):
        for recorded in ("Infinity", "NaN", "-1", "true", '"1"'):
            with self.subTest(recorded=recorded), tempfile.TemporaryDirectory() as root:
                with open(os.path.join(root, "save_time.json"), "w", encoding="utf-8") as record:
                    record.write(f'{{"slowest_save_s": {recorded}}}')
                self.assertEqual(self._clock(root, 30.0).slowest_s, 0.0)


class ClusterShapeTest(unittest.TestCase):
    def _plan(
        self, root: str, workers: int, replicas: int, batch: int = 128
    ) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            num_workers=workers,
            num_replicas=replicas,
            global_batch_size=batch,
            per_replica_batch_size=batch // replicas,
            model_dir=types.SimpleNamespace(cluster_json=os.path.join(root, "cluster.json")),
            writes_results=True,
        )

    def test_a_resume_on_another_shape_says_what_it_keeps_and_what_not(self):
        with tempfile.TemporaryDirectory() as root:
            preemption.note_cluster_shape(self._plan(root, 2, 2), None)
            not_kept = (
                "tfdist: not kept: which examples the rest of this epoch reads (each input "
                "pipeline skips the steps done in its own new share, so some of the epoch's "
                "examples are read twice and others not at all; from the next epoch on each is "
                "read once an epoch), nor the weights the first cluster would have reached "
                "(docs/preemption.md)"
            )
            for start, shape, said in (
                ((1, 3), (2, 2, 128), []),
                (
                    (1, 3),
                    (1, 1, 128),
                    [
                        "tfdist: resuming a backup made by 2 worker(s) of 2 replica(s) in all with "
                        "a global batch of 128 on 1 worker(s) of 1 replica(s) in all with a global "
                        "batch of 128",
                        "tfdist: kept: the saved step, the global batch of 128 (128 per replica "
                        "now), hence the steps per epoch and the learning-rate schedule",
                        not_kept,
                    ],
                ),
                (
                    (2, 0),  # At an epoch's start: nothing of an epoch to read otherwise.
                    (3, 3, 66),
                    [
                        "tfdist: resuming a backup made by 1 worker(s) of 1 replica(s) in all with "
                        "a global batch of 128 on 3 worker(s) of 3 replica(s) in all with a global "
                        "batch of 66",
                        "tfdist: kept: the saved step; changed: the global batch, 128 -> 66, and "
                        "with it the steps per epoch (when the data's size sets them) and the "
                        "learning-rate schedule",
                        "tfdist: not kept: the weights the first cluster would have reached "
                        "(docs/preemption.md)",
                    ],
                ),
                (None, (2, 2, 128), []),  # A fresh run, not a resume.
            ):
                stderr = io.StringIO()
                with contextlib.redirect_stderr(stderr):
                    preemption.note_cluster_shape(self._plan(root, *shape), start)
                self.assertEqual(stderr.getvalue().splitlines(), said)

    def test_a_damaged_record_is_no_reason_to_stop_and_none_of_its_text_is_shown(self):
        planted = '"\\u001b]0;pwned\\u0007"'  # A terminal title, were it printed.
        for text in (
            '{"num_workers": ',
            f'{{"num_workers": {planted}, "num_replicas": 1, "global_batch_size": 8}}',
            '{"num_workers": true, "num_replicas": 1, "global_batch_size": 8}',
            '{"num_workers": 0, "num_replicas": 1, "global_batch_size": 8}',
        ):
            with self.subTest(text=text), tempfile.TemporaryDirectory() as root:
                with open(os.path.join(root, "cluster.json"), "w", encoding="utf-8") as record:
                    record.write(text)
                stderr = io.StringIO()
                with contextlib.redirect_stderr(stderr):
                    preemption.note_cluster_shape(self._plan(root, 1, 1), (1, 0))
                self.assertEqual(stderr.getvalue(), "")  # As a resume with no record.
                with open(os.path.join(root, "cluster.json"), encoding="utf-8") as record:
                    self.assertEqual(json.load(record)["num_workers"], 1)


@pytest.mark.multiprocess
class PreemptedRunTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ["rm", "-rf", self.scratch], check=False)

    def _preempted_and_resumed(self, name: str, *flags: str) -> subprocess.CompletedProcess:
        """Runs the program with `flags` preempted at epoch 2 step 2 (the one line, exit 75),
        then again: the resumed run, which starts at step 3."""
        program = [sys.executable, MLP_PROGRAM, *_FLAGS, *flags, f"--model_dir={name}"]
        first = _run([*program, "--term_at=2,2"], self.scratch)
        self.assertEqual(first.returncode, EXIT_PREEMPTED, first.stderr[-2000:])
        self.assertRegex(first.stderr.strip().splitlines()[-1], "^" + _PREEMPTED + "$")
        resumed = _run(program, self.scratch)
        self.assertEqual(resumed.returncode, 0, resumed.stderr[-2000:])
        self.assertIn("tfdist: resuming at epoch 2 step 3 from the backup", resumed.stderr)
        return resumed

    def test_one_device_in_keras_3_saves_at_the_step_and_resumes_to_the_same_weights(self):
        resumed = self._preempted_and_resumed("preempted", "--keras=3")
        whole = _run(
            [sys.executable, MLP_PROGRAM, *_FLAGS, "--keras=3", "--model_dir=whole"], self.scratch
        )
        self.assertEqual(digests(resumed.stdout), digests(whole.stdout))

    def test_two_workers_and_two_replicas_stop_at_one_step_and_resume_to_the_same_weights(self):
        """2 workers under launch, worker:1 signalled after set-up, where TensorFlow's own
        SIGTERM handler used to hold the notice (it ends at once, 75), then in epoch 2 (both
        save at one step; launch restarts them each time); and one process of 2 replicas
        (mirrored) preempted and started again, against one process of 2 replicas never
        interrupted: the same global batch over 2 replicas sums the same gradients in the same
        order in each, so all end with the same weights."""
        preempted = _run(
            [
                *_TFDIST,
                "launch",
                "--num_workers=2",
                "--max_restarts=2",
                "--",
                "python",
                MLP_PROGRAM,
                "--strategy=multi_worker_mirrored",
                *_FLAGS,
                "--model_dir=workers",
                "--notice_at=built",  # worker:1 gets the SIGTERM after set-up,
                "--term_at=2,2",  # and in epoch 2.
            ],
            self.scratch,
        )
        self.assertEqual(preempted.returncode, 0, preempted.stderr[-3000:])
        output = preempted.stdout + preempted.stderr
        self.assertIn(
            "[worker:1] mlp_with_digest.py: preempted (SIGTERM) before training began: nothing "
            "new to save; start the same command again.",
            output,
        )
        for task in ("worker:0", "worker:1"):
            self.assertRegex(output, rf"\[{task}\] {_PREEMPTED}")
        for number in (1, 2):
            self.assertRegex(
                output,
                r"worker:[01] exited with status 75; restarting every task from the saved state "
                rf"\(preemption {number}/2, apart from failures\)",
            )
        self.assertEqual(output.count("tfdist: resuming at epoch 2 step 3"), 2)
        workers = digests(preempted.stdout)
        self.assertEqual(set(workers), {"worker:0", "worker:1"}, output[-3000:])
        replicas = ["--strategy=mirrored", "--num_cpu_devices=2"]
        resumed = self._preempted_and_resumed("replicas", *replicas)
        whole = _run(
            [sys.executable, MLP_PROGRAM, *replicas, *_FLAGS, "--model_dir=whole"], self.scratch
        )
        (expected,) = digests(whole.stdout).values()
        self.assertEqual(set(workers.values()), {expected}, workers)
        self.assertEqual(list(digests(resumed.stdout).values()), [expected])

    def test_a_notice_before_training_or_after_it_ends_the_process_at_once_with_its_line(self):
        """Before `setup` (SIGUSR1, --preemption_signal's: it used to kill with 138), nothing
        to save: 75; after `fit` returned, the run complete: 0. Then a rerun of the finished run
        trains nothing: already finished, its weights the finished run's."""
        program = [sys.executable, MLP_PROGRAM, "--epochs=1", "--deterministic"]
        early = _run(
            [*program, "--model_dir=early", "--preemption_signal=SIGUSR1", "--notice_at=setup"],
            self.scratch,
        )
        self.assertEqual(early.returncode, EXIT_PREEMPTED, early.stderr[-2000:])
        self.assertEqual(
            early.stderr.strip().splitlines()[-1],
            "mlp_with_digest.py: preempted (SIGUSR1) before training began: nothing new to "
            "save; start the same command again.",
        )
        late = _run([*program, "--model_dir=late", "--notice_at=end"], self.scratch)
        self.assertEqual(late.returncode, 0, late.stderr[-2000:])
        self.assertEqual(
            late.stderr.strip().splitlines()[-1],
            "mlp_with_digest.py: a preemption notice (SIGTERM) came after the run finished at "
            "epoch 1: nothing is left to save or train.",
        )
        again = _run([*program, "--model_dir=late"], self.scratch)
        self.assertEqual(again.returncode, 0, again.stderr[-2000:])
        self.assertIn("tfdist: already finished at epoch 1 in model_dir=", again.stderr)
        self.assertNotIn("examples/s", again.stderr, "nothing trained")
        whole = _run([*program, "--model_dir=whole"], self.scratch)
        self.assertEqual(digests(again.stdout), digests(whole.stdout))

    def test_a_preempted_parameter_server_chief_saves_at_the_step_and_the_job_resumes_there(self):
        """chief + worker + ps under launch, the chief signalled at epoch 2 step 2: it stops
        scheduling, joins the coordinator and saves; the launcher starts the job again, which
        resumes at step 3, its one worker's input where it stopped. One worker applies the
        same updates in the same order as one device, so the weights equal one device's
        uninterrupted run's."""
        preempted = _run(
            [
                *_TFDIST,
                "launch",
                "--num_workers=1",
                "--num_ps=1",
                "--chief",
                "--max_restarts=1",
                "--",
                "python",
                MLP_PROGRAM,
                "--strategy=parameter_server",
                *_FLAGS,
                "--model_dir=ps",
                "--term_at=2,2",  # The chief runs the callbacks, so it gets the SIGTERM.
            ],
            self.scratch,
        )
        output = preempted.stdout + preempted.stderr
        self.assertEqual(preempted.returncode, 0, output[-3000:])
        self.assertRegex(output, rf"\[chief:0\] {_PREEMPTED}")
        self.assertIn(
            "chief:0 exited with status 75; restarting every task from the saved state "
            "(preemption 1/1, apart from failures)",
            output,
        )
        self.assertIn("[chief:0] tfdist: resuming at epoch 2 step 3", output)
        self.assertIn("3 epoch(s) of 4 steps", output)
        whole = _run([sys.executable, MLP_PROGRAM, *_FLAGS, "--model_dir=whole"], self.scratch)
        (expected,) = digests(whole.stdout).values()
        self.assertEqual(digests(preempted.stdout), {"chief:0": expected}, output[-3000:])


if __name__ == "__main__":
    unittest.main()
