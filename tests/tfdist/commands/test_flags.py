"""The command layer's flags: train flags that users' absl programs take, CLI-only flags that only
`tfdist` defines, every flag a FlagHolder of its command, and the checks on numbers and between
flags."""

import dataclasses
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import pytest
from absl import flags

from tfdist.commands import cli  # noqa: F401  (defines every command's flags)
from tfdist.commands import data
from tfdist.commands import doctor
from tfdist.commands import flags as tfdist_flags
from tfdist.commands import launch
from tfdist.commands.manifest import command as manifest
from tfdist.commands import train_flags
from tfdist.runtime.config import ConfigError
from tfdist.commands.benchmark import command as benchmark
from tfdist.commands.cost_plan import command as cost_plan

_ROOT = pathlib.Path(__file__).resolve().parents[3]
# A `tensorflow` that fails to import (see cli_runner.py): the user's program must not need it.
_NO_TENSORFLOW = pathlib.Path(__file__).resolve().parents[1] / "no_tensorflow"
_CLI_ONLY = (
    "num_workers",
    "replicas_per_worker",
    "json",
    "replicas",
    "data",
    "warmup_steps",
    "timed_steps",
    "rounds",
    "overhead",
    "plot",
    "port",
    "evaluator",
    "max_restarts",
    "network",
    "timeout_s",
    "format",
    "name",
    "image",
    "restart_policy",
    "time_limit",
    "gpus_per_task",
    "probe",
    "probe_timeout_s",
    "tf_config",
)
_USER_PROGRAM = """\
import json
import sys

from absl import app, flags
import tfdist
from tfdist.commands import train_flags

tfdist.define_flags()
_MINE = flags.DEFINE_integer("my_steps", 1, "mine")
CLI_ONLY = {cli_only!r}


def main(argv):
    config = train_flags.run_config(None)
    print(json.dumps({{
        "my_steps": _MINE.value, "strategy": config.strategy.strategy.value,
        "global_batch_size": config.input.global_batch_size, "model": config.train.model,
        "epochs": config.train.epochs,
        "precision": config.train.mixed_precision.value,
        "cli_only_defined": sorted(set(CLI_ONLY) & set(flags.FLAGS)),
        "tensorflow_imported": "tensorflow" in sys.modules}}))


if __name__ == "__main__":
    app.run(main)
"""
_EMPTY_TENSORFLOW = '''"""Stands in for TensorFlow in a program whose flags are under test."""'''
# A program with its own defaults for tfdist's flags, set the absl way after define_flags().
_DEFAULTS_PROGRAM = """\
import json

from absl import flags
import tfdist

tfdist.define_flags()
flags.FLAGS.set_default("epochs", 5)
flags.FLAGS.set_default("per_replica_batch_size", 64)


def main(argv):
    config = tfdist.config_from_flags()
    print(json.dumps({"epochs": config.train.epochs,
                      "per_replica_batch_size": config.train.per_replica_batch_size,
                      "global_batch_size": config.input.global_batch_size}))


if __name__ == "__main__":
    tfdist.run(main)
"""


# A function an engine calls in its own process (a Ray worker), with the flags as a list.
_ARGV_PROGRAM = """
import json, sys
import tfdist

try:
    config = tfdist.config_from_flags(["ray-worker", *sys.argv[1:]])
except tfdist.USER_ERRORS as error:
    print(error)
    sys.exit(2)
print(json.dumps([config.train.epochs, config.input.global_batch_size]))
"""


def _parse(command: str, *args: str) -> None:
    tfdist_flags.parse(command, ["tfdist", *args])


@pytest.mark.multiprocess
class UserProgramTest(unittest.TestCase):
    """A user's own absl program that calls `tfdist.define_flags()`, run as a child without
    TensorFlow."""

    def run_program(self, *args: str, text: str | None = None) -> subprocess.CompletedProcess:
        """The program `text` (else `_USER_PROGRAM`, which runs without TensorFlow). `text`
        runs with an empty `tensorflow` module for the one that `tfdist.config_from_flags()`
        imports once the config is built: TensorFlow itself is not under test there, and its
        import would cost each child seconds of CPU."""
        directory = self.enterContext(tempfile.TemporaryDirectory())
        program = pathlib.Path(directory, "my_train.py")
        program.write_text(text or _USER_PROGRAM.format(cli_only=_CLI_ONLY), encoding="utf-8")
        tensorflow = _NO_TENSORFLOW
        if text:
            tensorflow = pathlib.Path(directory, "empty_tensorflow")
            (tensorflow / "tensorflow").mkdir(parents=True)
            (tensorflow / "tensorflow" / "__init__.py").write_text(
                _EMPTY_TENSORFLOW, encoding="utf-8"
            )
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(tensorflow), str(_ROOT), os.environ.get("PYTHONPATH")])
            ),
        )
        env.pop("TF_CONFIG", None)
        return subprocess.run(
            [sys.executable, str(program), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=directory,
            timeout=120,
            check=False,
        )

    def test_help_lists_the_programs_and_the_train_flags_but_no_cli_flag(self):
        result = self.run_program("--help")  # absl's --help exits 1.
        self.assertNotIn("Traceback", result.stderr)  # E.g. "tfdist imported tensorflow".
        self.assertIn("Try --helpfull", result.stdout)
        for name in (
            "my_steps",
            "strategy",
            "global_batch_size",
            "mixed_precision",
            "model_dir",
            "model",
            "learning_rate",
            "cluster_resolver",
            "num_ps",
            "tf_logs",
        ):
            self.assertRegex(result.stdout, rf"--(\[no\])?{name}:")
        for name in ("image", "name", "port", "format", "num_workers", "evaluator"):
            self.assertNotRegex(result.stdout, rf"--(\[no\])?{name}:")

    def test_run_config_after_app_run(self):
        result = self.run_program(
            "--my_steps=7",
            "--strategy=mirrored",
            "--global_batch_size=64",
            "--model=resnet20",
            "--epochs=5",
            "--mixed_precision=mixed_bfloat16",
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(
            json.loads(result.stdout),
            {
                "my_steps": 7,
                "strategy": "mirrored",
                "global_batch_size": 64,
                "model": "resnet20",
                "epochs": 5,
                "precision": "mixed_bfloat16",
                "cli_only_defined": [],
                "tensorflow_imported": False,
            },
        )

    def test_a_program_sets_its_own_defaults_and_the_command_line_overrides_them(self):
        result = self.run_program("--help", text=_DEFAULTS_PROGRAM)
        blocks = {block.split(":")[0]: block for block in result.stdout.split("\n  --")}
        self.assertIn("(default: '5')", blocks["epochs"])
        self.assertIn("(default: '64')", blocks["per_replica_batch_size"])
        for args, expected in (
            ((), (5, 64, 128)),
            (("--epochs=2", "--per_replica_batch_size=8"), (2, 8, 128)),
            (("--global_batch_size=256",), (5, None, 256)),
        ):
            with self.subTest(args=args):
                result = self.run_program(*args, text=_DEFAULTS_PROGRAM)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(
                    json.loads(result.stdout.splitlines()[-1]),
                    dict(zip(("epochs", "per_replica_batch_size", "global_batch_size"), expected)),
                )

    def test_flags_from_a_list_where_nothing_parsed_argv(self):
        result = self.run_program("--epochs=3", "--global_batch_size=32", text=_ARGV_PROGRAM)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout.splitlines()[-1]), [3, 32])
        result = self.run_program("--epochs=many", text=_ARGV_PROGRAM)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(len(result.stdout.splitlines()), 1, result.stdout)
        self.assertIn("epochs", result.stdout)

    def test_cli_only_flags_are_unknown_to_the_program(self):
        result = self.run_program("--image=img")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("Unknown command line flag 'image'", result.stderr)


class FlagsTest(unittest.TestCase):
    """The flags in this process, with the CLI-only ones defined as `tfdist` defines them."""

    def setUp(self):
        super().setUp()
        self.addCleanup(tfdist_flags.FLAGS.unparse_flags)

    def test_every_command_registers_its_flags(self):
        self.assertEqual(set(tfdist_flags.COMMAND_FLAGS), set(cli.COMMANDS))

    def test_every_flag_is_a_holder_of_its_name(self):
        for command, holders in tfdist_flags.COMMAND_FLAGS.items():
            for name, holder in holders.items():
                with self.subTest(command=command, name=name):
                    self.assertIsInstance(holder, flags.FlagHolder)
                    self.assertEqual(holder.name, name)
                    self.assertIn(name, tfdist_flags.FLAGS)

    def test_train_takes_no_cli_only_flag(self):
        self.assertEqual(set(tfdist_flags.COMMAND_FLAGS["train"]) & set(_CLI_ONLY), set())
        others = {
            name
            for command, holders in tfdist_flags.COMMAND_FLAGS.items()
            if command != "train"
            for name in holders
        }
        self.assertLessEqual(set(_CLI_ONLY), others)

    def test_every_train_flags_default_builds_its_config_fields_default(self):
        # The flags made from a config's field (flags.FIELDS) and those written by hand for one
        # alike: parsed at their defaults, they build each field's default.
        _parse("train")
        built, checked = train_flags.run_config(None), set()
        flag_of = {field: name for name, field in tfdist_flags.FIELDS.items()}
        configs = {
            part: getattr(built, part) for part in ("strategy", "input", "train", "optimizer")
        }
        for part, config in [*configs.items(), ("run", built)]:
            for field in dataclasses.fields(config):
                # A RunConfig field is a flag's only when made from it (--strategy is not).
                name = flag_of.get(
                    (type(config), field.name), None if part == "run" else field.name
                )
                if name in tfdist_flags.COMMAND_FLAGS["train"]:
                    checked.add(name)
                    with self.subTest(flag=name):
                        self.assertEqual(getattr(config, field.name), field.default)
        made = {name for name in tfdist_flags.FIELDS if name in tfdist_flags.COMMAND_FLAGS["train"]}
        self.assertLessEqual(made, checked)
        self.assertGreaterEqual(len(made), 59)
        self.assertEqual(checked - made, {"keras"})  # By hand: its default follows the env.

    def test_every_flag_made_from_a_field_has_its_default_help_and_bounds(self):
        for name, (config, field_name) in tfdist_flags.FIELDS.items():
            field = next(each for each in dataclasses.fields(config) if each.name == field_name)
            flag = tfdist_flags.FLAGS[name]
            default = field.default
            if isinstance(default, tuple):
                default = list(default)
            elif hasattr(type(default), "parse"):
                default = str(default)
            with self.subTest(flag=name):
                self.assertEqual(flag.default, default)
                if "help" in field.metadata and name != "per_replica_batch_size":  # Its plan:.
                    self.assertTrue(flag.help.endswith(field.metadata["help"]), flag.help)
                if "bounds" in field.metadata:
                    self.assertEqual(
                        (flag.parser.lower_bound, flag.parser.upper_bound), field.metadata["bounds"]
                    )

    def test_every_number_flag_takes_finite_ascii_decimals_only(self):
        # Python's int() and float() take all of these; absl's parsers pass them on.
        refused = {
            "not_ascii": "٣٢",
            "hex": "0x8",
            "underscore": "1_0",
            "twenty_digits": "9" * 20,
            "space": " 8",
            "nan": "nan",
            "inf": "inf",
            "overflow": "1e400",
            "fullwidth": "８",
        }
        numbers = 0
        for command, holders in tfdist_flags.COMMAND_FLAGS.items():
            for name in holders:
                parser = tfdist_flags.FLAGS[name].parser
                if not isinstance(parser, (flags.IntegerParser, flags.FloatParser)):
                    continue
                numbers += 1
                for case, value in refused.items():
                    with self.subTest(command=command, name=name, case=case):
                        with self.assertRaisesRegex(
                            flags.IllegalFlagValueError,
                            rf"^flag --{name}=.*(is not a decimal|is not a finite)",
                        ):
                            _parse(command, f"--{name}={value}")
        self.assertGreater(numbers, 40)

    def test_durations_must_be_above_zero(self):
        for command, name in (
            ("train", "collective_timeout_s"),
            ("launch", "timeout_s"),
            ("doctor", "probe_timeout_s"),
        ):
            with self.subTest(name=name):
                with self.assertRaisesRegex(
                    flags.IllegalFlagValueError, f"--{name}=0.*seconds above 0"
                ):
                    _parse(command, f"--{name}=0")

    def test_a_flag_of_another_command_is_a_usage_error(self):
        with self.assertRaisesRegex(
            tfdist_flags.UsageError, r"--image is not a flag of `tfdist train`"
        ):
            _parse("train", "--image=img")

    def test_run_config(self):
        _parse(
            "train",
            "--strategy=mirrored",
            "--epochs=4",
            "--model=resnet20",
            "--lr_schedule=step",
            "--lr_step_boundaries=1,2",
            "--seed=9",
            "--tf_logs",
        )
        config = train_flags.run_config(None)
        self.assertEqual(config.strategy.strategy.value, "mirrored")
        self.assertEqual(config.train.epochs, 4)
        self.assertEqual(config.train.model, "resnet20")
        self.assertEqual(config.optimizer.lr_step_boundaries, (1.0, 2.0))
        self.assertEqual((config.train.seed, config.input.seed), (9, 9))
        self.assertTrue(config.show_tf_logs)

    def test_the_batch_is_global_or_per_replica_not_both(self):
        for command in ("train", "benchmark"):
            with self.subTest(command=command):
                _parse(command, "--per_replica_batch_size=32")
                config = train_flags.run_config(None)
                self.assertEqual(
                    (config.train.per_replica_batch_size, config.input.global_batch_size), (32, 128)
                )
                _parse(command, "--global_batch_size=64")
                config = train_flags.run_config(None)
                self.assertEqual(
                    (config.train.per_replica_batch_size, config.input.global_batch_size),
                    (None, 64),
                )
                with self.assertRaisesRegex(
                    flags.IllegalFlagValueError,
                    r"^flags global_batch_size=64, per_replica_batch_size=32: both set "
                    r"the batch; give one: --per_replica_batch_size=N \(the global batch is "
                    r"N x the replicas\) or --global_batch_size=N \(split over the "
                    r"replicas\)$",
                ):
                    _parse(command, "--global_batch_size=64", "--per_replica_batch_size=32")
        _parse("benchmark", "--per_replica_batch_size=32")
        self.assertEqual(benchmark.sweep_from_flags().train_args, ["--per_replica_batch_size=32"])

    def test_plan_and_train_share_one_per_replica_batch_flag(self):
        for command in ("train", "benchmark", "plan"):
            self.assertIs(
                tfdist_flags.COMMAND_FLAGS[command]["per_replica_batch_size"],
                train_flags.PER_REPLICA_BATCH_SIZE,
            )
        self.assertNotIn("global_batch_size", tfdist_flags.COMMAND_FLAGS["plan"])
        _parse("plan", "--per_replica_batch_size=32")
        request = cost_plan.request_from_flags()
        self.assertEqual(request.per_replica_batch_size, 32)
        self.assertIn("per_replica_batch_size", request.given)

    def test_benchmark_passes_on_only_the_train_flags_given(self):
        _parse(
            "benchmark",
            "--epochs=2",
            "--replicas=2,1",
            "--json=/tmp/b.json",
            "--lr_step_boundaries=1,2",
            "--tf_logs",
        )
        sweep = benchmark.sweep_from_flags()
        self.assertCountEqual(
            sweep.train_args, ["--epochs=2", "--lr_step_boundaries=1,2", "--tf_logs"]
        )
        self.assertEqual((sweep.replicas, sweep.json_path), ([1, 2], "/tmp/b.json"))

    def test_benchmark_of_a_python_dataset_sweeps_real_data_only(self):
        _parse("benchmark", "--dataset=python:my_data:splits")
        self.assertEqual(benchmark.sweep_from_flags().data, ["real"])
        with self.assertRaisesRegex(
            flags.IllegalFlagValueError,
            r"--data=synthetic: a python: dataset brings its own model "
            r"and data, .*; pass --data=real$",
        ):
            _parse("benchmark", "--dataset=python:my_data:splits", "--data=synthetic,real")

    def test_slurm_layout_needs_a_resolver_that_reads_slurm(self):
        with self.assertRaisesRegex(
            flags.IllegalFlagValueError,
            "num_ps=1, .*: they describe a Slurm job step; use --cluster_resolver=slurm or auto",
        ):
            _parse("train", "--cluster_resolver=tf_config", "--num_ps=1")
        _parse("train", "--num_ps=1")  # auto: `cluster_and_source` decides.
        _parse("train", "--cluster_resolver=slurm", "--num_ps=1", "--chief")
        self.assertEqual((train_flags.NUM_PS.value, train_flags.CHIEF.value), (1, True))
        _parse("launch", "--num_ps=1", "--chief")  # Launch's own cluster: no resolver.

    def test_command_options(self):
        _parse("launch", "--num_workers=3", "--num_ps=1", "--chief", "--timeout_s=60")
        with mock.patch.object(launch.launcher, "main", return_value=0) as launched:
            launch.main(["python"], tfdist_commands=cli.COMMANDS)
        config = launched.call_args.args[0]
        self.assertEqual(
            (config.num_workers, config.num_ps, config.chief, config.timeout_s), (3, 1, True, 60.0)
        )
        self.assertEqual(dict(config.env), {"TF_USE_LEGACY_KERAS": "1"})
        _parse("manifest", "--image=img", "--num_workers=4")
        with mock.patch("sys.stdout", new_callable=io.StringIO) as stdout:
            manifest.main(["train"])
        self.assertIn("parallelism: 4", stdout.getvalue())
        _parse("data check", "--num_workers=3", "--replicas_per_worker=2")
        with (
            mock.patch.object(data, "check_coverage", return_value=0) as checked,
            mock.patch.object(data.tf_import, "import_tensorflow"),
        ):
            data.check_main()
        self.assertEqual(checked.call_args.args[1:], (3, 2, None))
        _parse("data serve", "--port=6000")
        with (
            mock.patch.object(data, "serve", return_value=0) as served,
            mock.patch.object(data.tf_import, "import_tensorflow"),
        ):
            data.serve_main()
        served.assert_called_once_with(6000, 2)
        _parse("doctor", "--probe")
        with mock.patch.object(doctor, "report", return_value=0) as reported:
            doctor.main()
        self.assertEqual(
            (
                reported.call_args.kwargs["probe_peers"],
                reported.call_args.kwargs["probe_timeout_s"],
            ),
            (True, 5.0),
        )

    def test_config_errors_are_worded_as_flags(self):
        self.assertEqual(
            tfdist_flags.as_flags(
                "global_batch_size=3 does not split; e.g. global_batch_size=2 "
                "(epochs=3, --epochs=4, files=x, config.seed=1, "
                "lr_step_boundaries[1]=nan)"
            ),
            "--global_batch_size=3 does not split; e.g. --global_batch_size=2 "
            "(--epochs=3, --epochs=4, files=x, config.seed=1, lr_step_boundaries[1]=nan)",
        )


_STEP = {
    "SLURM_PROCID": "1",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NODELIST": "node[9-10]",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_NODEID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_JOB_ID": "42",
    "SLURM_STEP_ID": "0",
}


class ClusterResolverTest(unittest.TestCase):
    """Where --cluster_resolver finds the cluster: auto takes a Slurm step of several tasks
    (plain `srun -n2 python my_train.py`) when TF_CONFIG is unset, and says so."""

    def _resolve(self, env: dict, *args: str):
        _parse("train", *args)
        with mock.patch.dict(os.environ, env, clear=True):
            return train_flags.cluster_and_source()

    def test_auto_takes_a_slurm_step_of_several_tasks(self):
        cluster, source = self._resolve(_STEP)
        self.assertEqual(dict(cluster.jobs), {"worker": ("node9:8930", "node10:8930")})
        self.assertEqual((cluster.task.type.value, cluster.task.index), ("worker", 1))
        self.assertEqual(
            source[0],
            "the Slurm job step (--cluster_resolver=auto: TF_CONFIG is unset and "
            "SLURM_STEP_NUM_TASKS=2)",
        )
        self.assertRegex(source[1], r"^  Slurm job 42 step 0; ports from the job id")

    def test_auto_with_the_slurm_layout_flags(self):
        env = {**_STEP, "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "2,1"}
        env.update(SLURM_NODEID="0", SLURM_LOCALID="1")  # Rank 1: node9's second task.
        cluster, _ = self._resolve(env, "--num_ps=1", "--chief")
        self.assertEqual(
            (cluster.num_ps, cluster.has_chief, cluster.task.type.value), (1, True, "ps")
        )

    def test_a_one_task_step_stays_one_process(self):
        cluster, source = self._resolve({**_STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"})
        self.assertIsNone(cluster)
        self.assertEqual(source, ["TF_CONFIG"])

    def test_tf_config_comes_first(self):
        """`tfdist launch` (or Ray) inside a Slurm allocation: the TF_CONFIG it sets wins."""
        tf_config = {
            "cluster": {"worker": ["127.0.0.1:2001"]},
            "task": {"type": "worker", "index": 0},
        }
        cluster, source = self._resolve({**_STEP, "TF_CONFIG": json.dumps(tf_config)})
        self.assertEqual(dict(cluster.jobs), {"worker": ("127.0.0.1:2001",)})
        self.assertIsNone(cluster.origin)
        self.assertEqual(source, ["TF_CONFIG"])

    def test_the_slurm_resolver_takes_a_one_task_step(self):
        env = {**_STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0", "SLURM_NODEID": "0"}
        env["SLURM_STEP_NODELIST"], env["SLURM_STEP_TASKS_PER_NODE"] = "node9", "1"
        cluster, source = self._resolve(env, "--cluster_resolver=slurm")
        self.assertEqual(dict(cluster.jobs), {"worker": ("node9:8930",)})
        self.assertEqual(source[0], "the Slurm job step (--cluster_resolver=slurm)")

    def test_slurm_layout_flags_where_the_cluster_is_not_a_slurm_steps(self):
        for env, source in (
            ({}, "none (one process)"),
            (
                {
                    "TF_CONFIG": json.dumps(
                        {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
                    )
                },
                "TF_CONFIG's",
            ),
        ):
            with self.assertRaisesRegex(
                tfdist_flags.UsageError,
                rf"^--num_ps, --chief given, but this task's cluster is {re.escape(source)}, not a "
                r"Slurm job step's \(--cluster_resolver=auto\); use --cluster_resolver=slurm or "
                r"auto \(inside srun\), or drop them\.$",
            ):
                self._resolve(env, "--num_ps=1", "--chief")

    def test_train_says_where_a_slurm_steps_cluster_came_from_in_one_line(self):
        _parse("train")
        with mock.patch.dict(os.environ, _STEP, clear=True):
            with mock.patch("sys.stderr", new_callable=io.StringIO) as stderr:
                train_flags.cluster()
        self.assertRegex(
            stderr.getvalue(),
            r"^tfdist: worker:1 at node10:8930: the cluster of the Slurm job step "
            r"\(--cluster_resolver=auto: TF_CONFIG is unset and SLURM_STEP_NUM_TASKS=2\); "
            r"ports from the job id, srun having reserved none: 8888 \+ SLURM_JOB_ID mod 1000 "
            r"\(42\) \+ 1000 n for the n-th task on a node\n$",
        )


class EngineGraceTest(unittest.TestCase):
    """The grace period an engine gives its task (TFDIST_GRACE_S), as the run config reads it."""

    def test_the_engines_grace_or_none_and_a_bad_value_in_one_line(self):
        for value, expected in ((None, None), ("30", 30.0), ("2.5", 2.5)):
            env = {} if value is None else {"TFDIST_GRACE_S": value}
            with mock.patch.dict(os.environ, env, clear=False):
                if value is None:
                    os.environ.pop("TFDIST_GRACE_S", None)
                self.assertEqual(train_flags.engine_grace_s(), expected)
        for value in ("abc", "0", "-1", "nan", "inf"):
            with mock.patch.dict(os.environ, {"TFDIST_GRACE_S": value}):
                with self.assertRaisesRegex(
                    ConfigError,
                    rf"^TFDIST_GRACE_S='{value}' is not a number of seconds above 0; set it to "
                    r"the seconds this task's engine gives from a preemption notice to SIGKILL, "
                    r"e\.g\. 30, or unset it\.$",
                ):
                    train_flags.engine_grace_s()


if __name__ == "__main__":
    unittest.main()
