"""`tfdist.CustomLoop` (`tfdist.training.keras2.custom_loop`): a loop that learns and resumes from
its checkpoint, and each way its input goes wrong."""

import contextlib
import dataclasses
import io
import os
import signal
from unittest import mock

import tensorflow as tf
import tf_keras

import tfdist
from tests.leaving import Left
from tests.tfdist.training.tabular import FEATURES
from tests.tfdist.training.tabular import MIRRORED
from tests.tfdist.training.tabular import PolicyReset
from tests.tfdist.training.tabular import arrays_dataset_fn
from tests.tfdist.training.tabular import run_config
from tests.tfdist.training.tabular import tabular
from tests.tfdist.training.tabular import tabular_dataset_fn
from tests.tfdist.training.tabular import tabular_model
from tests.tfdist.training.tabular import training_step
from tfdist.runtime.config import ConfigError
from tfdist.runtime import notice
from tfdist.runtime.model_dir import ModelDir
from tfdist.strategies import make_cluster
from tfdist.training import preemption


class CustomLoopTest(PolicyReset):
    def test_a_loop_learns_and_resumes_from_its_checkpoint(self):
        model_dir = self.get_temp_dir()
        config = run_config(
            global_batch_size=32, strategy=MIRRORED, steps_per_epoch=16, model_dir=model_dir
        )
        plan = tfdist.setup(config)

        def run_epochs(epochs):
            loop = tfdist.CustomLoop(plan, tabular_model)
            batches = loop.distribute(tabular_dataset_fn(32))
            step = training_step(loop)
            first = loop.restore()
            losses = []
            for epoch in range(first, epochs):
                losses.append(loop.run(step, batches, plan.steps_per_epoch))
                loop.save(epoch + 1)
            return first, losses

        first, losses = run_epochs(2)
        self.assertEqual(first, 0)
        self.assertLess(losses[-1], losses[0])
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            first, losses = run_epochs(3)
        self.assertEqual((first, len(losses)), (2, 1))
        self.assertRegex(
            stderr.getvalue(),
            r"^tfdist: your dataset function tests\.tfdist\.training\.tabular:tabular_dataset_fn\."
            r"<locals>\.make reads on after the batches of the 32 step\(s\) trained \(they are "
            r"read and dropped\): the batches the run would have read if it reads in a fixed "
            r"order \(seeded shuffles, deterministic maps\)\n"
            r"tfdist: resuming at epoch 3 from the checkpoint an earlier loop left in this "
            r"--model_dir; pass another --model_dir to start afresh\n"
            r"tfdist: a backup save takes [0-9.]+ s: a preemption's grace period must cover one "
            r"\(30 s on Kubernetes unless `tfdist manifest --grace_s` says otherwise, 30 s on GKE "
            r"spot nodes\); set TFDIST_GRACE_S=S to have it checked\n$",
        )

    def test_a_notice_between_runs_ends_the_next_at_a_step_and_the_loop_resumes_to_the_weights(
        self,
    ):
        """SIGTERM between training runs, where an evaluation or the user's own code runs: noted,
        it ends the next run after its first step. After the last epoch's save the run is
        complete: a rerun trains nothing, and a notice ends the process with 0."""

        def train(model_dir: str, *, notice_at_epoch: int | None = None):
            loop, step = self._loop_and_step(model_dir, epochs=3)
            batches = loop.distribute(tabular_dataset_fn(16))
            evaluation = loop.distribute(tabular_dataset_fn(16, training=False), training=False)
            for epoch in range(loop.restore(), 3):
                loop.run(step, batches, loop.plan.steps_per_epoch)
                if epoch + 1 == notice_at_epoch:
                    os.kill(os.getpid(), signal.SIGTERM)
                loop.run(lambda features, labels: None, iter(evaluation), 2)
                loop.save(epoch + 1)
            return [weight.numpy() for weight in loop.model.weights]

        preempted_dir = self.get_temp_dir() + "/preempted"
        with self.assertRaisesRegex(
            tfdist.errors.Preempted, r"^preempted at epoch 2 step 1; state saved in "
        ):
            train(preempted_dir, notice_at_epoch=1)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            resumed = train(preempted_dir)
        self.assertIn("tfdist: resuming at epoch 2 step 2 from the checkpoint", stderr.getvalue())
        whole = train(self.get_temp_dir() + "/whole")
        for got, expected in zip(resumed, whole):
            self.assertAllEqual(got, expected)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(Left) as left:
            os.kill(os.getpid(), signal.SIGTERM)  # After the last epoch's save.
        self.assertEqual(left.exception.status, 0)
        self.assertIn("(SIGTERM) came after the run finished at epoch 3", stderr.getvalue())
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            again = train(self.get_temp_dir() + "/whole")
        self.assertIn("tfdist: already finished at epoch 3 in model_dir=", stderr.getvalue())
        for got, expected in zip(again, whole):
            self.assertAllEqual(got, expected)

    def test_workers_agreeing_on_a_notice_stop_the_next_run_at_its_first_step(self):
        """As multi_worker_mirrored's workers agree (`preemption.Agreement`), here over the 2
        replicas of mirrored."""
        with mock.patch.object(
            preemption,
            "watch",
            lambda plan: preemption.Watch(notice.current(), preemption.Agreement()),
        ):
            plan = tfdist.setup(
                run_config(
                    global_batch_size=16,
                    strategy=MIRRORED,
                    epochs=2,
                    model_dir=self.get_temp_dir(),
                ),
                train_examples=64,
            )
            loop = tfdist.CustomLoop(plan, tabular_model)
        batches = loop.distribute(tabular_dataset_fn(16))

        def step(features, labels):
            del features
            return tf.cast(labels[0], tf.float32)

        loop.run(step, batches, 2)
        loop.save(1)
        os.kill(os.getpid(), signal.SIGTERM)
        with self.assertRaisesRegex(
            tfdist.errors.Preempted, r"^preempted at epoch 2 step 1; state saved in "
        ):
            loop.run(step, batches, 2)

    def test_without_a_model_dir_the_line_names_the_epoch_the_notice_came_in(self):
        loop, step = self._loop_and_step(epochs=3)
        batches = loop.distribute(tabular_dataset_fn(16))
        loop.run(step, batches, loop.plan.steps_per_epoch)
        loop.save(1)
        os.kill(os.getpid(), signal.SIGTERM)
        with self.assertRaisesRegex(
            tfdist.errors.Preempted,
            r"^preempted at epoch 2 step 1; nothing saved \(no --model_dir\)",
        ):
            loop.run(step, batches, loop.plan.steps_per_epoch)

    def _loop_and_step(self, model_dir=None, model=tabular_model, epochs=1):
        plan = tfdist.setup(
            run_config(global_batch_size=16, model_dir=model_dir, epochs=epochs),
            train_examples=64,
        )
        tf_keras.utils.set_random_seed(3)  # The same initial weights in every loop.
        loop = tfdist.CustomLoop(plan, model)

        def step(features, labels):
            with tf.GradientTape() as tape:
                loss = loop.scale_loss(
                    tf_keras.losses.sparse_categorical_crossentropy(
                        labels, loop.model(features, training=True)
                    )
                )
            loop.minimize(loss, tape)
            return loss

        return loop, step

    def test_bad_input_to_a_loop(self):
        with self.assertRaisesRegex(
            ConfigError,
            r"^model function .* returned a "
            r"builtins.NoneType, not a tf-keras model",
        ):
            self._loop_and_step(model=lambda: None)
        loop, step = self._loop_and_step()
        features, labels = tabular(64, seed=1)
        finite = loop.distribute(arrays_dataset_fn(features, labels, repeat=False))
        for steps in (0, -1, 1.5):
            with self.assertRaisesRegex(ConfigError, rf"^steps={steps} is not an integer from 1 "):
                loop.run(step, finite, steps)
        with self.assertRaisesRegex(
            ConfigError,
            r"^dataset: it ran out of batches before the "
            r"run's last step; end the dataset with",
        ):
            loop.run(step, finite, 5)  # It holds 4.
        with self.assertRaisesRegex(ConfigError, r"^epochs_done=-1 is not an integer from 0 "):
            loop.save(-1)
        with self.assertRaisesRegex(ConfigError, r"^step_fn=42 is a int, not a function"):
            loop.run(42, finite, 1)
        plan = tfdist.setup(run_config(global_batch_size=16), train_examples=64)
        with self.assertRaisesRegex(
            ConfigError,
            r"^optimizer='adam' is a str, not a tf_keras "
            r"optimizer; pass one built in",
        ):
            tfdist.CustomLoop(plan, tabular_model, optimizer="adam")

    def test_an_iterator_is_read_as_it_is(self):
        loop, step = self._loop_and_step()
        features, labels = tabular(64, seed=1)
        finite = loop.distribute(arrays_dataset_fn(features, labels, repeat=False))
        for _ in range(2):  # A fresh pass each time, as an evaluation reads it.
            self.assertGreater(loop.run(step, iter(finite), 4), 0.0)
        loop.run(step, finite, 4)
        with self.assertRaisesRegex(ConfigError, r"^dataset: it ran out of batches"):
            loop.run(step, finite, 1)  # Its kept iterator has read all 4.

    def test_tasks_that_do_not_train(self):
        cluster = dict(num_workers=1, num_ps=1, chief=True, evaluator=True, ports=[1, 2, 3, 4])
        for task, role in (
            (("worker", 0), "serve"),
            (("ps", 0), "serve"),
            (("evaluator", 0), "evaluate"),
        ):
            config = dataclasses.replace(
                run_config(model_dir=self.get_temp_dir()),
                cluster=make_cluster(**cluster, task=task),
            )
            plan = tfdist.setup(config, train_examples=64)
            self.assertEqual(plan.role.value, role)
            with self.assertRaisesRegex(
                ConfigError,
                rf"^{task[0]}:0 has role {role}: "
                r"CustomLoop trains.*tfdist.serve\(plan\)",
            ):
                tfdist.CustomLoop(plan, tabular_model)
        with self.assertRaisesRegex(
            ConfigError,
            r"^serve: local has role train, not serve; "
            r"call it only when plan.role is",
        ):
            tfdist.serve(tfdist.setup(run_config(), train_examples=64))

    def test_a_loop_holds_its_model_dir(self):
        model_dir = self.get_temp_dir()
        with ModelDir(model_dir).owned():  # Another run's.
            with self.assertRaisesRegex(
                ConfigError,
                rf"^model_dir='{model_dir}' is in use by "
                "another run",
            ):
                self._loop_and_step(model_dir)
        self._loop_and_step(model_dir)
        self._loop_and_step(model_dir)  # A newer loop in this process takes the lock over.
        with self.assertRaisesRegex(ConfigError, "is in use by another run"):
            ModelDir(model_dir).hold()

    def test_a_checkpoint_of_another_model(self):
        model_dir = self.get_temp_dir()
        self._loop_and_step(model_dir)[0].save(1)

        def wider():
            return tf_keras.Sequential(
                [
                    tf_keras.layers.Input((FEATURES,)),
                    tf_keras.layers.Dense(7),
                    tf_keras.layers.Dense(2),
                ]
            )

        loop, _ = self._loop_and_step(model_dir, wider)
        with self.assertRaisesRegex(
            ConfigError,
            rf"^model_dir='{model_dir}': the checkpoint a "
            r"loop left there cannot be restored into this "
            r"one \(.*incompatible.*\); resume it with",
        ):
            loop.restore()


if __name__ == "__main__":
    tf.test.main()
