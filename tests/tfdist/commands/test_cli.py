"""The CLI's contract: fast help, and every bad input as one stderr line with exit status 2."""

import contextlib
import io
import json
import os
import tempfile
import unittest
from unittest import mock

import pytest
from absl.testing import parameterized

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.commands import cli

_PS_CLUSTER = json.dumps(
    {
        "cluster": {
            "chief": ["127.0.0.1:2001"],
            "worker": ["127.0.0.1:2002"],
            "ps": ["127.0.0.1:2003"],
        },
        "task": {"type": "chief", "index": 0},
    }
)


class InterruptTest(unittest.TestCase):
    def test_ctrl_c_is_one_line_and_status_130(self):
        def interrupted():
            raise KeyboardInterrupt

        stderr = io.StringIO()
        with (
            mock.patch.dict(cli.COMMANDS, {"doctor": interrupted}),
            contextlib.redirect_stderr(stderr),
        ):
            status = cli.main(["tfdist", "doctor"])
        self.assertEqual(status, 130)
        self.assertEqual(stderr.getvalue(), "tfdist doctor: interrupted.\n")


class CommandAfterDashesTest(unittest.TestCase):
    def test_a_command_without_dashes_is_told_where_it_goes(self):
        for command in ("launch", "manifest"):
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr):
                status = cli.main(["tfdist", command, "--num_workers=2", "python", "x.py"])
            self.assertEqual(status, 2)
            self.assertEqual(
                stderr.getvalue(),
                f"tfdist {command}: error: unexpected argument "
                f"'python'; put the command to run after `--`: "
                f"tfdist {command} [--flag=value ...] -- python "
                "x.py ...\n",
            )


@pytest.mark.multiprocess
class HelpTest(unittest.TestCase):
    def test_help_answers_without_tensorflow_and_lists_commands(self):
        result = run_tfdist("--help", without_tensorflow=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("train", result.stdout)
        self.assertIn("doctor", result.stdout)

    def test_train_help_lists_every_train_flag(self):
        result = run_tfdist("train", "--help", without_tensorflow=True)
        self.assertEqual(result.returncode, 0)
        for name in (
            "strategy",
            "num_gpus",
            "num_cpu_devices",
            "all_reduce",
            "num_packs",
            "collective",
            "collective_timeout_s",
            "variable_partition",
            "mixed_precision",
            "dataset",
            "data_dir",
            "model",
            "global_batch_size",
            "epochs",
            "steps_per_epoch",
            "validation_steps",
            "steps_per_execution",
            "optimizer",
            "learning_rate",
            "model_dir",
            "metrics_json",
            "seed",
            "momentum",
            "weight_decay",
            "lr_scaling",
            "base_batch_size",
            "warmup_epochs",
            "lr_schedule",
            "lr_step_boundaries",
            "lr_step_factor",
            "clip_norm",
            "grad_accum_steps",
            "gradient_noise_eta",
            "gradient_noise_gamma",
            "lars_eeta",
            "lars_mode",
            "lars_exclude",
            "allreduce_dtype",
            "allreduce_pack_mib",
        ):
            self.assertIn(f"--{name}:", result.stdout)

    def test_helpfull_lists_absl_flags_too(self):
        result = run_tfdist("train", "--helpfull")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--flagfile", result.stdout)

    def test_no_command_prints_usage_and_fails(self):
        result = run_tfdist()
        self.assertEqual(result.returncode, 2)
        self.assertIn("usage: tfdist <command>", result.stderr)


# Bad input that each command refuses before TensorFlow starts: (name, arguments, the line's
# text). They run in one child in which importing TensorFlow fails.
_BEFORE_TENSORFLOW = (
    ("unknown_command", ["trian"], "'trian'"),
    ("unknown_strategy", ["train", "--strategy=mirroed"], "--strategy=mirroed"),
    ("unknown_all_reduce", ["train", "--all_reduce=ring"], "--all_reduce=ring"),
    ("unknown_collective", ["train", "--collective=gloo"], "--collective=gloo"),
    ("unknown_precision", ["train", "--mixed_precision=fp8"], "--mixed_precision=fp8"),
    ("unknown_optimizer", ["train", "--optimizer=lamb"], "--optimizer=lamb"),
    ("unknown_keras", ["train", "--keras=4"], "--keras=4"),
    (
        "keras_3_step_backups",
        ["train", "--keras=3", "--backup_every=50", "--model_dir=/tmp/tfdist-unused"],
        "--backup_every='50' with --keras=3",
    ),
    ("launch_unknown_keras", ["launch", "--keras=2.1", "--", "train"], "--keras=2.1"),
    ("unknown_model", ["train", "--model=vgg"], "model='vgg'"),
    ("malformed_dataset", ["train", "--dataset=Not A Name"], "dataset='Not A Name'"),
    ("tfrecord_without_classes", ["train", "--dataset=tfrecord:/x/*"], "--num_classes"),
    ("unknown_autoshard", ["train", "--autoshard=files"], "--autoshard=files"),
    ("unknown_preprocess_on", ["train", "--preprocess_on=gpu"], "--preprocess_on=gpu"),
    (
        "bad_service_address",
        ["train", "--tf_data_service=localhost:5050"],
        "tf_data_service='localhost:5050'",
    ),
    ("data_without_subcommand", ["data"], "needs a sub-command: data check or data serve"),
    ("unknown_data_subcommand", ["data", "chek"], "'data chek'"),
    ("train_flag_to_data_check", ["data", "check", "--epochs=2"], "--epochs"),
    ("zero_service_workers", ["data", "serve", "--num_workers=0"], "--num_workers=0"),
    ("zero_epochs", ["train", "--epochs=0"], "--epochs=0"),
    ("text_epochs", ["train", "--epochs=many"], "--epochs=many"),
    ("zero_batch", ["train", "--global_batch_size=0"], "--global_batch_size=0"),
    ("zero_cpus", ["train", "--num_cpu_devices=0"], "--num_cpu_devices=0"),
    ("zero_packs", ["train", "--num_packs=0"], "--num_packs=0"),
    ("negative_gpus", ["train", "--num_gpus=-1"], "--num_gpus=-1"),
    ("zero_steps", ["train", "--steps_per_epoch=0"], "--steps_per_epoch=0"),
    ("zero_validation_steps", ["train", "--validation_steps=0"], "--validation_steps=0"),
    ("zero_execution_steps", ["train", "--steps_per_execution=0"], "--steps_per_execution=0"),
    ("zero_learning_rate", ["train", "--learning_rate=0"], "learning_rate=0.0"),
    ("zero_timeout", ["train", "--collective_timeout_s=0"], "collective_timeout_s=0.0"),
    (
        "bad_partition",
        ["train", "--variable_partition=max_shards"],
        "variable_partition='max_shards'",
    ),
    ("packs_without_nccl", ["train", "--num_packs=4"], "num_packs=4"),
    (
        "options_of_other_strategy",
        ["train", "--strategy=mirrored", "--collective=ring"],
        "collective=ring",
    ),
    ("negative_learning_rate", ["train", "--learning_rate=-0.1"], "learning_rate=-0.1"),
    ("negative_noise", ["train", "--gradient_noise_eta=-1"], "gradient_noise_eta=-1.0 is negative"),
    ("negative_weight_decay", ["train", "--weight_decay=-0.1"], "weight_decay=-0.1"),
    ("momentum_of_one", ["train", "--momentum=1"], "momentum=1.0 is outside [0, 1)"),
    (
        "warmup_longer_than_training",
        ["train", "--epochs=3", "--warmup_epochs=3"],
        "--warmup_epochs=3 is not shorter than training (--epochs=3)",
    ),
    (
        "boundaries_not_increasing",
        ["train", "--epochs=9", "--lr_schedule=step", "--lr_step_boundaries=6,3"],
        "lr_step_boundaries=6,3 are not increasing",
    ),
    (
        "boundaries_not_epochs",
        ["train", "--lr_schedule=step", "--lr_step_boundaries=x"],
        "lr_step_boundaries='x' is not a list of epochs",
    ),
    (
        "step_without_boundaries",
        ["train", "--lr_schedule=step"],
        "--lr_schedule=step needs step boundaries in epochs, e.g. --lr_step_boundaries=30,60.",
    ),
    (
        "lars_flag_with_adam",
        ["train", "--lars_eeta=0.01"],
        "lars_eeta applies to --optimizer=lars, not adam",
    ),
    ("unknown_lr_scaling", ["train", "--lr_scaling=cubic"], "--lr_scaling=cubic"),
    (
        "accumulation_with_float16",
        ["train", "--grad_accum_steps=2", "--mixed_precision=mixed_float16"],
        "--grad_accum_steps=2 with --mixed_precision=mixed_float16",
    ),
    (
        "compression_on_one_device",
        ["train", "--strategy=one_device", "--allreduce_dtype=bfloat16"],
        "allreduce_dtype=bfloat16",
    ),
    ("unknown_flag", ["train", "--epoch=3"], "'epoch'"),
    ("stray_argument", ["train", "mirrored"], "'mirrored'"),
    ("flag_of_other_command", ["train", "--tf_config={}"], "--tf_config"),
)


@pytest.fixture(name="refused_before_tensorflow", scope="module")
def _refused_before_tensorflow():
    results = run_tfdist_cases([args for _, args, _ in _BEFORE_TENSORFLOW], without_tensorflow=True)
    return {name: result for (name, _, _), result in zip(_BEFORE_TENSORFLOW, results)}


@pytest.mark.multiprocess
class BadInputTest(parameterized.TestCase):
    """Each case: one line on stderr naming the flag or field and the value; exit 2."""

    def assert_usage_error(self, result, *expected):
        assert_one_line_error(self, result, *expected)

    @pytest.fixture(autouse=True)
    def _shared(self, refused_before_tensorflow):
        self.refused_before_tensorflow = refused_before_tensorflow

    @parameterized.named_parameters(
        *((name, name, expected) for name, _, expected in _BEFORE_TENSORFLOW)
    )
    def test_rejected_before_tensorflow_starts(self, case, expected):
        self.assert_usage_error(self.refused_before_tensorflow[case], expected)

    def test_malformed_tf_config(self):
        result = run_tfdist("train", tf_config='{"cluster": {"worker": ["localhost"]}}')
        self.assert_usage_error(result, "TF_CONFIG cluster.worker[0]", '"localhost"')

    def test_keras_follows_the_environment_unless_named(self):
        # Generated data: the flavour is the point, and the built-in dataset would be read (or
        # generated) in the user's own ~/tensorflow_datasets.
        quick = (
            "--dataset=synthetic",
            "--num_classes=4",
            "--image_size=8",
            "--epochs=1",
            "--steps_per_epoch=2",
            "--validation_steps=1",
        )
        chose_3 = run_tfdist("train", *quick, extra_env={"TF_USE_LEGACY_KERAS": "0"})
        self.assertEqual(chose_3.returncode, 0, chose_3.stderr[-2000:])
        self.assertIn("tfdist: Keras 3 step: 2 optimizer updates", chose_3.stderr)
        named_2 = run_tfdist("train", "--keras=2", *quick, extra_env={"TF_USE_LEGACY_KERAS": "0"})
        self.assertEqual(named_2.returncode, 0, named_2.stderr[-2000:])
        self.assertNotIn("Keras 3 step", named_2.stderr)

    def test_flagfile_is_read(self):
        path = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "bad.flags")
        with open(path, "w", encoding="utf-8") as flagfile:
            flagfile.write("--epochs=0\n")
        self.assert_usage_error(run_tfdist("train", f"--flagfile={path}"), "--epochs=0")

    def test_rejected_after_tensorflow_starts(self):
        cases = [  # (flags, TF_CONFIG, the line's text)
            (
                ["--num_cpu_devices=2", "--global_batch_size=3"],
                None,
                "global_batch_size=3 does not split evenly over 2 replicas; use a multiple of 2, "
                "e.g. --global_batch_size=2 or 4",
            ),
            (["--strategy=parameter_server"], None, "strategy=parameter_server needs ps tasks"),
            (
                ["--strategy=multi_worker_mirrored"],
                _PS_CLUSTER,
                "strategy=multi_worker_mirrored cannot use the cluster's 1 ps",
            ),
            (
                ["--measure_noise_scale"],
                None,
                "--measure_noise_scale=True with 1 replica under --strategy=one_device",
            ),
            (
                ["--measure_noise_scale"],
                _PS_CLUSTER,
                "--measure_noise_scale=True with --strategy=parameter_server",
            ),
        ]
        metrics = os.path.join(self.enterContext(tempfile.TemporaryDirectory()), "metrics.json")
        results = run_tfdist_cases(
            [["train", *args, f"--metrics_json={metrics}"] for args, _, _ in cases],
            case_envs=[{"TF_CONFIG": tf_config} if tf_config else {} for _, tf_config, _ in cases],
        )
        for (args, _, expected), result in zip(cases, results):
            with self.subTest(args=args):
                self.assert_usage_error(result, expected)
                self.assertFalse(os.path.exists(metrics), "nothing may be half-written")


if __name__ == "__main__":
    unittest.main()
