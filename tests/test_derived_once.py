"""Every fact about a run is derived in one place (docs/ARCHITECTURE.md "Derive once").

Each test replaces the one derivation of a fact, wherever a module has bound it, and shows that
every consumer follows the replacement: none computes the fact again on its own.
"""

import ast
import contextlib
import pathlib
import sys
import tempfile
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import absltest

import tfdist
from tfdist import strategies
from tfdist.cluster import launcher
from tfdist.cluster import manifests
from tfdist.commands import doctor
from tfdist.commands import flags as flags_lib
from tfdist.commands import launch
from tfdist.input_pipelines import InputConfig
from tfdist.runtime import keras_env
from tfdist.runtime import keras_flavour
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.runtime.model_dir import ModelDir
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyKind
from tfdist.strategies import cluster as cluster_lib
from tfdist.strategies import devices
from tfdist.strategies import jobset
from tfdist.strategies import mirrored
from tfdist.strategies import selection
from tfdist.strategies import slurm
from tfdist.training import data
from tfdist.training import model as training_model
from tfdist.training.keras2 import fit as keras2_fit
from tfdist.training.keras3 import optim as keras3_optim
from tests.tf_test_case import TfTestCase

ROOT = pathlib.Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def replaced(function, replacement):
    """`function` replaced by `replacement` in every loaded module that has bound it."""
    with contextlib.ExitStack() as stack:
        for module in list(sys.modules.values()):
            for name, value in list(vars(module).items() if module else ()):
                if value is function:
                    stack.enter_context(mock.patch.object(module, name, replacement))
        yield


def _tabular_data(global_batch_size: int):
    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        features = np.ones((64, 3), "float32")
        labels = np.zeros((64,), "int64")
        return (
            tf.data.Dataset.from_tensor_slices((features, labels))
            .repeat()
            .batch(context.get_per_replica_batch_size(global_batch_size))
        )

    return make


def _tf_keras_model():
    return tf_keras.Sequential(
        [tf_keras.Input((3,)), tf_keras.layers.Dense(2, activation="softmax")]
    )


def _keras3_model():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])


class PerReplicaBatchTest(absltest.TestCase):
    """`input_pipelines.per_replica_batch_size`: the plan's, and every pipeline's batch."""

    def test_the_plan_and_the_pipelines_follow_the_one_function(self):
        original = tfdist.input_pipelines.per_replica_batch_size
        with replaced(original, lambda global_batch_size, replicas: 3):
            plan = tfdist.setup(
                RunConfig(
                    strategy=StrategyConfig(strategy="mirrored", num_cpu_devices=2),
                    input=InputConfig(
                        dataset="synthetic", num_classes=2, image_size=8, global_batch_size=16
                    ),
                    train=TrainConfig(epochs=1, steps_per_epoch=1),
                )
            )
            dataset = data.dataset_fn(plan, plan.config.input, "train", training=True)(
                tf.distribute.InputContext(num_replicas_in_sync=2)
            )
        self.assertEqual(plan.per_replica_batch_size, 3)
        images, _ = next(iter(dataset))
        self.assertEqual(images.shape[0], 3)


class UpdateBatchTest(absltest.TestCase):
    """`RunConfig.update_batch_size` (global batch x accumulation): the plan's, the rate's
    scaling in both Kerases' optimizers."""

    def test_every_rate_is_scaled_for_the_one_update_batch(self):
        config = RunConfig(
            input=InputConfig(dataset="synthetic", num_classes=2, global_batch_size=256),
            optimizer=OptimizerConfig(
                optimizer="sgd",
                learning_rate=0.1,
                lr_scaling="linear",
                base_batch_size=256,
                grad_accum_steps=2,
            ),
            train=TrainConfig(epochs=1, steps_per_epoch=4),
        )
        with mock.patch.object(RunConfig, "update_batch_size", 1024):
            plan = tfdist.setup(config)
            tf_keras_rate = keras2_fit.tfdist_optimizer(plan).learning_rate
            keras3_rate = keras3_optim.build_optimizer(
                config.optimizer,
                update_batch_size=plan.update_batch_size,
                updates_per_epoch=plan.updates_per_epoch,
                epochs=1,
                transforms=training_model.gradient_transforms(plan),
            ).learning_rate
            self.assertEqual(plan.update_batch_size, 1024)
        self.assertAlmostEqual(float(tf_keras_rate), 0.4)  # 0.1 x 1024 / 256.
        self.assertAlmostEqual(float(keras3_rate), 0.4)


class GpuPresenceTest(absltest.TestCase):
    """`devices.physical_gpus` (the GPUs here) and `devices.is_gpu` (a device's type)."""

    def test_every_count_of_this_machines_gpus_reads_the_one_list(self):
        fake = [
            tf.config.PhysicalDevice(f"/physical_device:GPU:{index}", "GPU") for index in range(2)
        ]
        with (
            replaced(devices.physical_gpus, lambda: fake),
            mock.patch.object(
                tf.config.experimental,
                "get_device_details",
                return_value={"compute_capability": (8, 0)},
            ),
        ):
            self.assertLen(strategies.visible_gpus(), 2)  # `tfdist benchmark` sweeps GPUs.
            self.assertEqual(strategies.num_gpus(StrategyConfig()), 2)
            self.assertIs(strategies.kind_for(StrategyConfig(), None), StrategyKind.MIRRORED)
            self.assertTrue(keras_flavour._has_fast_fp16_gpu())  # pylint: disable=protected-access
            lines = doctor._device_lines(StrategyConfig())  # pylint: disable=protected-access
        self.assertIn("2 GPU", lines[0])

    def test_every_reading_of_a_replicas_device_reads_the_one_test(self):
        with replaced(devices.is_gpu, lambda device: True):
            plan = tfdist.setup(
                RunConfig(
                    strategy=StrategyConfig(strategy="mirrored", num_cpu_devices=2),
                    input=InputConfig(dataset="synthetic", num_classes=2, image_size=8),
                    train=TrainConfig(epochs=1, steps_per_epoch=1),
                )
            )
            nccl = mirrored._cross_device_ops(  # pylint: disable=protected-access
                StrategyConfig(strategy="mirrored", all_reduce="nccl"), ["/cpu:0", "/cpu:1"]
            )
        self.assertEqual(plan.num_gpu_replicas, 2)
        self.assertTrue(plan.placement.on_device)  # `auto`: on the device when GPUs train.
        self.assertTrue(data.input_options(plan).experimental_fetch_to_device)
        self.assertIsInstance(nccl, tf.distribute.NcclAllReduce)


class StrategyKindTest(absltest.TestCase):
    """`selection.kind_for`: the plan's kind, the strategy built, doctor's line."""

    def test_the_plan_the_strategy_and_doctor_follow_the_one_resolution(self):
        with replaced(selection.kind_for, lambda config, cluster: StrategyKind.MIRRORED):
            plan = tfdist.setup(
                RunConfig(
                    input=InputConfig(dataset="synthetic", num_classes=2),
                    train=TrainConfig(epochs=1, steps_per_epoch=1),
                )
            )
            line = doctor._strategy_line(StrategyConfig(), None)  # pylint: disable=protected-access
        self.assertIs(plan.kind, StrategyKind.MIRRORED)
        self.assertIsInstance(plan.strategy, tf.distribute.MirroredStrategy)
        self.assertIn("auto picks mirrored", line)


class ModelDirLayoutTest(TfTestCase):
    """`ModelDir`: where each Keras' training writes its checkpoints and history."""

    def _fit(self, keras_version: int, build) -> str:
        model_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        plan = tfdist.setup(
            RunConfig(
                strategy=StrategyConfig(strategy="one_device"),
                input=InputConfig(global_batch_size=8),
                train=TrainConfig(
                    epochs=1, steps_per_epoch=2, keras=keras_version, model_dir=model_dir
                ),
            )
        )
        tfdist.fit(plan, build, _tabular_data(8), None, loss="sparse_categorical_crossentropy")
        return model_dir

    def test_both_kerases_write_where_the_one_layout_says(self):
        layout = {
            "checkpoints": property(lambda model_dir: f"{model_dir.root}/weights"),
            "history_json": property(lambda model_dir: f"{model_dir.root}/epochs.json"),
        }
        with mock.patch.multiple(ModelDir, **layout):
            written = {
                keras_version: sorted(
                    path.name for path in pathlib.Path(self._fit(keras_version, build)).iterdir()
                )
                for keras_version, build in ((2, _tf_keras_model), (3, _keras3_model))
            }
        for keras_version, names in written.items():
            with self.subTest(keras=keras_version):
                self.assertIn("weights", names)
                self.assertIn("epochs.json", names)
                self.assertNotIn("checkpoints", names)
                self.assertNotIn("history.json", names)


class PsNeedChiefTest(absltest.TestCase):
    """`cluster.ps_without_chief`: TF_CONFIG, a Slurm step, a JobSet pod, `tfdist launch`, and
    `tfdist manifest`'s TFJob and JobSet."""

    def test_every_cluster_tfdist_reads_or_makes_follows_the_one_rule(self):
        with replaced(
            cluster_lib.ps_without_chief, lambda num_ps, has_chief: "a layout the rule refuses"
        ):
            refusals = {
                "TF_CONFIG": lambda: strategies.parse_tf_config(
                    {
                        "cluster": {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]},
                        "task": {"type": "chief", "index": 0},
                    }
                ),
                "slurm": lambda: slurm._check_arguments(  # pylint: disable=protected-access
                    8888, 1, True
                ),
                "launch": lambda: launcher.LaunchConfig(command=("train",), num_ps=1, chief=True),
                "tfjob manifest": lambda: manifests.tfjob(
                    name="job", image="img", train_args=[], num_workers=1, num_ps=1, chief=True
                ),
                "jobset manifest": lambda: manifests.jobset(
                    name="job",
                    pods=manifests.Pods(image="img"),
                    train_args=[],
                    num_workers=1,
                    num_ps=1,
                    chief=True,
                ),
                "JobSet pod": lambda: jobset.cluster_from_jobset(
                    {
                        "TFDIST_JOBSET_LAYOUT": "chief=1,worker=1,ps=1",
                        "TFDIST_JOBSET_NAME": "job",
                        "TFDIST_REPLICATED_JOB": "chief",
                        "TFDIST_JOB_INDEX": "0",
                        "JOB_COMPLETION_INDEX": "0",
                        "TFDIST_JOBSET_SUBDOMAIN": "job",
                        "TFDIST_JOBSET_PORT": "2222",
                    }
                ),
            }
            for where, make in refusals.items():
                with self.subTest(where=where):
                    with self.assertRaisesRegex(ValueError, "a layout the rule refuses"):
                        make()


class LegacyKerasDefaultTest(absltest.TestCase):
    """TF_USE_LEGACY_KERAS is defaulted in `keras_env` alone; launched tasks get what it says."""

    def test_only_keras_env_names_the_variable_in_code(self):
        for path in (
            sorted((ROOT / "tfdist").rglob("*.py"))
            + sorted((ROOT / "strategies").rglob("*.py"))
            + sorted((ROOT / "input_pipelines").rglob("*.py"))
        ):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value == keras_env.VARIABLE:
                    self.assertEqual(
                        path.relative_to(ROOT).as_posix(), "tfdist/runtime/keras_env.py"
                    )

    def test_launched_tasks_get_the_environment_keras_env_gives(self):
        with replaced(keras_env.environment, lambda keras_version: {"TF_USE_LEGACY_KERAS": "x"}):
            flags_lib.parse("launch", ["tfdist", "--num_workers=1"])
            self.addCleanup(flags_lib.FLAGS.unparse_flags)
            with mock.patch.object(launcher, "main", return_value=0) as launched:
                launch.main(["python"], tfdist_commands=())
        self.assertEqual(dict(launched.call_args.args[0].env), {"TF_USE_LEGACY_KERAS": "x"})


if __name__ == "__main__":
    absltest.main()
