"""The bad-input corpus: every flag of every command, fed each class of bad value, and broken
clusters in TF_CONFIG. Each must end in exit status 2 and one stderr line that names the flag or
field, without a traceback, before TensorFlow is imported, with nothing written.

Cases run in this process through `cli.main`, with TensorFlow's import (and the launcher's
network, opened once every check has passed) replaced by a sentinel: a case that gets that far
was accepted, which fails the test. The few inputs that only TensorFlow can judge run as real
children at the end.
"""

import contextlib
import io
import json
import os
import re
import resource
import stat
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import pytest
from absl import flags

from tests import scratch_files
from tests.input_pipelines.records import bytes_feature
from tests.input_pipelines.records import encoded_image
from tests.input_pipelines.records import image_example
from tests.input_pipelines.records import write_records
from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist_cases
from tfdist.commands import cli
from tfdist.commands import flags as tfdist_flags
from tfdist.cluster import launcher as launch
from tfdist.cluster import rehearsal
from tfdist.runtime import tf_import

HUGE = "99999999999999999999"
# Digits Python's int() and float() take that are not plain decimals: Arabic-Indic, full-width,
# hexadecimal, with an underscore.
_NOT_DECIMAL = ("\u0663\u0662", "\uff18", "0x8", "1_0")
_INTEGERS = ("nan", "inf", "1.5", "x", "", HUGE, "-" + HUGE, *_NOT_DECIMAL)
_FLOATS = ("nan", "inf", "-inf", "1e999", "x", "", "-1", *_NOT_DECIMAL, "\u0660.5")
# Bad values of the flags that are strings or lists, by flag. {file} is an existing file,
# {dir} an existing directory.
_STRINGS = {
    "backup_every": ("0", "-5", "x", HUGE),
    "dataset": (
        "Not A Name",
        "tfrecord:",
        "tfrecord:/nowhere/*",
        "../up",
        "python:",
        "python:mod",
        "python:my mod:fn",
        "python:no_such_module_x:fn",
    ),
    "model": (
        "vgg",
        "",
        "a:",
        ":build",
        "my module:build",
        "no_such_module_x:build",
        "no_such_package_x.models:build",
    ),
    "data_dir": ("{file}", "{file}/sub", "/proc/tfdist_data"),
    "image": (
        "",
        "a b",
        "&a",
        "$(id)",
        "\u00fcn\u00ef/img:1",
        "img@sha256:abc",
        "a" * 10_000,
        "img\u202e:1",
    ),
    "cpu": ("-1", "x", "1.5.2", "", "1e400", HUGE, "0"),
    "memory": ("16 GB", "-1Gi", "", "1e400", "0"),
    "queue": ("Team A", "", "a" * 300, "q" * 100),
    "priority_class": ("Bad Name", ""),
    "service_account": ("Bad Name", ""),
    "volume_claim": ("Bad Name", ""),
    "node_selector": ("novalue", "a b=c", "k=v v", "a=b,a=c"),
    "tolerations": ("k:Sometimes", ":NoSchedule", "a b"),
    "mount_path": ("relative", "/", "", "/etc", "/mnt/../etc", "/mnt/a\nb"),
    "volume_dir": ("{file}", "{file}/sub", "/proc/sys/volumes"),
    "json": ("{dir}", "{file}/report.json", "/proc/report.json"),
    "lars_exclude": ("[unclosed", "(?P<x"),
    "log_dir": ("{file}", "{file}/sub", "/proc/sys/logs"),
    "lr_step_boundaries": ("x", "nan", "inf", "3,1"),
    "metrics_json": ("{dir}", "{file}/m.json", "/proc/m.json"),
    "model_dir": ("{file}", "{file}/sub", "/proc/sys/model"),
    "name": ("My_Job", "", "a" * 64, "../../etc"),
    "working_dir": ("relative", "", "/app/../etc", "/a\nb", "//app"),
    "address": ("", "http://head:8265", "head", "head:port", "a b:1", "\x1b[31m:1", "h:" + HUGE),
    "plot": ("{dir}", "/proc/plot.png"),
    "replicas": ("0", "x", "", HUGE, "-1"),
    "nodes": ("0", "x", "", HUGE, "-1", "1,,2"),
    "slurm_nodes": ("0", "", "-1", "gpu[9-", "a_1,b", "a,a", HUGE),
    "from_benchmark": ("{dir}", "{file}", "/nowhere/bench.json"),
    "noise_scale_json": ("{dir}", "{file}", "/nowhere/metrics.json"),
    "input_benchmark": ("{dir}", "{file}", "/nowhere/input.json"),
    "data": ("fake", ""),
    "tf_config": (
        "{worker",
        "[]",
        json.dumps(
            {
                "cluster": {"worker": ["localhost:2222", "127.0.0.1:2222"]},
                "task": {"type": "worker", "index": 0},
            }
        ),
    ),
    "tf_data_service": ("localhost:5050", "grpc://h:99999", "grpc://", "http://h:1"),
    "time_limit": ("soon", ""),
    "slurm_partition": ("a b", "", "$(id)", "a;b"),
    "slurm_account": ("a b", "", "`id`"),
    "slurm_qos": ("a b", "", "q\nx"),
    "slurm_mem": ("16 GB", "-1G", "", "1e400", "0", HUGE + "G"),
    "slurm_constraint": ("a b", "", "a;b", "$(id)"),
    "slurm_output": ("", "a b.out", "/a\nb", '"x"', "$HOME/x"),
    "slurm_sbatch": ("", "x", "--a --b", "--time=5", "--ntasks=2", "--no-requeue", "--x=\n"),
    "slurm_prologue": ("", "a\nb"),
    "slurm_array": ("", "x", "1-", "0-1%0", HUGE, "3-1"),
    "slurm_sweep": ("lr", "lr=", "=1", "a b=1", "model_dir=a,b", "seed=1,1", "no_such_flag=1,2"),
    "preempt": (
        *("pod", "pod@", "@30", "pod@x", "pod@-1", "pod@nan", "pod@inf", "pod@" + HUGE),
        *(f"pod@{digits}" for digits in (*_NOT_DECIMAL, " 3")),
    ),
    "variable_partition": ("max_shards", "min_size:0", "max_shards:" + HUGE, "fixed:2"),
}
# Flags that are judged only beside others: what to add so the bad value is what fails.
_CONTEXT = {
    "lars_exclude": ["--optimizer=lars"],
    "lr_step_boundaries": ["--lr_schedule=step", "--epochs=9"],
    **{
        name: ["--format=slurm"]
        for name in (
            "time_limit",
            "slurm_nodes",
            "slurm_partition",
            "slurm_account",
            "slurm_qos",
            "slurm_mem",
            "slurm_cpus_per_task",
            "slurm_exclusive",
            "slurm_constraint",
            "slurm_output",
            "slurm_sbatch",
            "slurm_prologue",
            "slurm_array",
            "slurm_sweep",
            "slurm_expand_vars",
            "slurm_tasks_per_node",
        )
    },
    **{
        name: ["--image=img"]
        for name in (
            "name",
            "cpu",
            "memory",
            "queue",
            "priority_class",
            "service_account",
            "volume_claim",
            "node_selector",
            "tolerations",
            "mount_path",
            "working_dir",
            "deadline_s",
            "grace_s",
        )
    },
}
# How a message names a flag, where it does not say its name.
_NAMED_AS = {"tf_config": "TF_CONFIG"}
# Each command's arguments around the flag under test.
_COMMAND_ARGS = {
    "train": ([], []),
    "benchmark": ([], []),
    "doctor": ([], []),
    "data check": ([], []),
    "data serve": ([], []),
    "launch": ([], ["--", sys.executable, "-c", "pass"]),
    "manifest": ([], ["--", "train"]),
    "ray": ([], ["--", "train"]),
    "rehearse": ([], ["job.yaml"]),
    "plan": (["--compute_ms=100", "--per_replica_batch_size=32", "--gradient_mib=1"], []),
}
_BAD_CLUSTERS = {
    "not_json": ("{worker", "TF_CONFIG"),
    "one_address_two_spellings": (
        {
            "cluster": {"worker": ["localhost:2222", "127.0.0.1:2222"]},
            "task": {"type": "worker", "index": 0},
        },
        "cluster.worker[1]",
    ),
    "two_evaluators": (
        {
            "cluster": {"worker": ["a:1"], "evaluator": ["e:1", "e:2"]},
            "task": {"type": "worker", "index": 0},
        },
        "cluster.evaluator",
    ),
    "ps_without_chief": (
        {"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "worker", "index": 0}},
        "no chief",
    ),
    "index_out_of_range": (
        {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}},
        "task.index",
    ),
}


class _ReachedTensorFlow(BaseException):
    """A case got past validation: bad input was accepted."""


def _values(name: str) -> tuple[str, ...]:
    parser = tfdist_flags.FLAGS[name].parser
    if isinstance(parser, flags.IntegerParser):
        lower = parser.lower_bound
        return _INTEGERS + ((str(lower - 1),) if lower is not None else ())
    if isinstance(parser, flags.FloatParser):
        return _FLOATS
    if isinstance(parser, (flags.EnumParser, flags.EnumClassParser)):
        return ("bogus", "")
    if isinstance(parser, flags.BooleanParser):
        return ("maybe",)
    return _STRINGS[name]


def _context(name: str, command_flags) -> list[str]:
    """What `_CONTEXT` adds beside --`name`, of the flags the command has."""
    return [arg for arg in _CONTEXT.get(name, []) if arg[2:].split("=")[0] in command_flags]


def _flag_cases():
    """(command, argv, the name the message must say) for every flag and bad value."""
    for command, names in tfdist_flags.COMMAND_FLAGS.items():
        before, after = _COMMAND_ARGS[command]
        for name in names:
            if name == "tf_logs":
                yield command, [*command.split(), "--tf_logs=maybe", *before, *after], name
                continue
            for value in _values(name):
                argv = [
                    *command.split(),
                    *before,
                    *_context(name, names),
                    f"--{name}={value}",
                    *after,
                ]
                yield command, argv, _NAMED_AS.get(name, name)


class _Scratch:
    """A directory with one file in it, for path cases; it must hold nothing else after."""

    def __init__(self):
        self._temp = tempfile.TemporaryDirectory()
        self.dir = self._temp.name
        self.file = os.path.join(self.dir, "file")
        open(self.file, "w", encoding="utf-8").close()

    def fill(self, argv: list[str]) -> list[str]:
        return [arg.replace("{file}", self.file).replace("{dir}", self.dir) for arg in argv]

    def untouched(self) -> bool:
        return os.listdir(self.dir) == ["file"]

    def close(self):
        self._temp.cleanup()


def _run_in_process(
    argv: list[str], tf_config: str | None = None, stdout_encoding: str = "utf-8"
) -> tuple[int, str, str]:
    """`tfdist ARGV` in this process, its stdout in `stdout_encoding`; (exit status, stderr,
    stdout). Raises _ReachedTensorFlow when the input was accepted."""
    stderr = io.StringIO()
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=stdout_encoding, write_through=True)
    reached = mock.Mock(side_effect=_ReachedTensorFlow)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ))
        os.environ.pop("TF_CONFIG", None)
        if tf_config is not None:
            os.environ["TF_CONFIG"] = tf_config
        for target, name in (
            (tf_import, "import_tensorflow"),
            (launch, "_open_network"),
            (rehearsal, "rehearse"),
        ):
            stack.enter_context(mock.patch.object(target, name, reached))
        stack.enter_context(contextlib.redirect_stderr(stderr))
        stack.enter_context(contextlib.redirect_stdout(stdout))
        status = cli.main(["tfdist", *argv])
    return status, stderr.getvalue(), stdout.buffer.getvalue().decode(stdout_encoding)


class _RejectingTest(unittest.TestCase):
    """Runs cases in this process and asserts each is rejected in one line."""

    def setUp(self):
        super().setUp()
        self.scratch = _Scratch()
        self.addCleanup(self.scratch.close)

    def assert_rejected(self, argv: list[str], named: str, tf_config: str | None = None, **options):
        try:
            status, stderr, stdout = _run_in_process(argv, tf_config, **options)
        except _ReachedTensorFlow:
            self.fail(f"accepted until TensorFlow: tfdist {' '.join(argv)}")
        lines = stderr.strip().splitlines()
        self.assertEqual(status, 2, f"tfdist {' '.join(argv)}: {stderr}")
        self.assertLen(lines, 1, f"tfdist {' '.join(argv)}: {stderr}")
        self.assertIn(named, lines[0], f"tfdist {' '.join(argv)}")
        self.assertNotIn("Traceback", stderr)
        self.assertFalse(
            re.search(r"[\x00-\x1f\x7f-\x9f]", lines[0]),
            f"tfdist {' '.join(argv)} echoed a control character",
        )
        self.assertTrue(self.scratch.untouched(), f"tfdist {' '.join(argv)} wrote something")
        self.assertEqual(stdout, "", f"tfdist {' '.join(argv)} printed (a manifest?)")

    def assertLen(self, sequence, length, message):  # pylint: disable=invalid-name
        self.assertEqual(len(sequence), length, message)


class CorpusTest(_RejectingTest):
    def test_every_flag_of_every_command(self):
        cases = list(_flag_cases())
        self.assertGreater(len(cases), 600)
        for command, argv, named in cases:
            with self.subTest(command=command, argv=argv):
                self.assert_rejected(self.scratch.fill(argv), named)

    def test_flags_of_other_commands_and_stray_arguments(self):
        for command in tfdist_flags.COMMAND_FLAGS:
            before, after = _COMMAND_ARGS[command]
            other = next(
                name
                for names in tfdist_flags.COMMAND_FLAGS.values()
                for name in names
                if name not in tfdist_flags.COMMAND_FLAGS[command]
            )
            for argv, named in (
                ([*command.split(), *before, f"--{other}=1", *after], other),
                ([*command.split(), *before, "stray", *after], "'stray'"),
            ):
                with self.subTest(argv=argv):
                    self.assert_rejected(argv, named)

    def test_both_batches(self):
        both = ["--global_batch_size=64", "--per_replica_batch_size=32"]
        for argv in (["train", *both], ["benchmark", *both], ["manifest", "--", "train", *both]):
            with self.subTest(argv=argv):
                self.assert_rejected(argv, "--global_batch_size=64, --per_replica_batch_size=32")

    def test_broken_clusters(self):
        for command in ("train", "doctor"):
            for name, (tf_config, named) in _BAD_CLUSTERS.items():
                text = tf_config if isinstance(tf_config, str) else json.dumps(tf_config)
                with self.subTest(command=command, cluster=name):
                    self.assert_rejected([command], named, tf_config=text)

    def test_launch_beyond_this_machine(self):
        self.assert_rejected(
            ["launch", "--num_workers=4000", "--", sys.executable, "-c", "pass"], "num_workers"
        )


# A benchmark report `plan` takes, and what to change in it.
_BENCHMARK = {
    "configurations": [
        {
            "replicas": 1,
            "data": "synthetic",
            "global_batch_size": 32,
            "step_time_s": {"median": 0.1},
        }
    ],
    "train_args": [],
    "trainable_parameters": 1000,
}
_PLAN = ["plan", "--compute_ms=100", "--per_replica_batch_size=32", "--gradient_mib=1"]
_ESCAPE = "\x1b[31m\x1b]0;pwned\x07"  # Colour, and a terminal title set.


class HostileInputTest(_RejectingTest):
    """Inputs that are deep, binary, endless, over-long or full of escapes, or that meet a
    deleted working directory or an ASCII stdout: one line each, as the corpus above."""

    def setUp(self):
        super().setUp()
        self._inputs = tempfile.TemporaryDirectory()
        self.addCleanup(self._inputs.cleanup)
        self.inputs = self._inputs.name

    def _write(self, name: str, content: str | bytes) -> str:
        path = os.path.join(self.inputs, name)
        with open(path, "wb") as file:
            file.write(content.encode() if isinstance(content, str) else content)
        return path

    def _fifo_and_zero(self) -> tuple[str, str]:
        """A FIFO (opening it would hang) and a /dev/zero-like node (reading it never ends)."""
        fifo, zero = os.path.join(self.inputs, "fifo"), os.path.join(self.inputs, "zero")
        os.mkfifo(fifo)
        if os.geteuid() != 0:
            self.skipTest("making a device node needs root")
        os.mknod(zero, stat.S_IFCHR | 0o666, os.makedev(1, 5))
        return fifo, zero

    def test_flag_files_that_are_binary_endless_or_nested_too_deep(self):
        fifo, zero = self._fifo_and_zero()
        nested = [os.path.join(self.inputs, f"nested{index}") for index in range(40)]
        for path, inner in zip(nested, nested[1:] + [None]):
            self._write(path, f"# level\n--flagfile={inner}\n" if inner else "--epochs=1\n")
        for path in (
            "/bin/ls",
            self._write("latin1", b"--name=caf\xe9\n"),
            self._write("nul", b"--epochs=1\x00\n"),
            fifo,
            zero,
            nested[0],
        ):
            for argv in (["train", f"--flagfile={path}"], ["plan", "--flagfile", path]):
                with self.subTest(argv=argv):
                    self.assert_rejected(argv, "--flagfile=")

    def test_benchmark_reports_that_are_endless_deep_or_out_of_range(self):
        fifo, zero = self._fifo_and_zero()
        huge_batch = json.dumps(_BENCHMARK).replace(
            '"global_batch_size": 32', '"global_batch_size": 1e400'
        )
        for name, content in (
            ("deep", "[" * 60_000 + "]" * 60_000),
            ("batch", huge_batch),
            ("parameters", json.dumps({**_BENCHMARK, "trainable_parameters": 10**30})),
        ):
            with self.subTest(report=name):
                self.assert_rejected(
                    ["plan", f"--from_benchmark={self._write(name, content)}"], "from_benchmark"
                )
        for path in (fifo, zero):
            self.assert_rejected(["plan", f"--from_benchmark={path}"], "from_benchmark")

    def test_a_tf_config_nested_too_deep(self):
        for command in ("train", "doctor"):
            self.assert_rejected([command], "TF_CONFIG", tf_config="[" * 60_000 + "]" * 60_000)

    def test_path_components_past_a_names_limit(self):
        long = "a" * 300
        for argv, named in (
            (["train", f"--model_dir={self.inputs}/{long}"], "model_dir"),
            (["train", f"--metrics_json={self.inputs}/{long}/m.json"], "metrics_json"),
            (["train", f"--metrics_json={self.inputs}/{long}"], "metrics_json"),
            ([*_PLAN, f"--json={self.inputs}/{long}"], "json"),
            (["data", "check", f"--data_dir={self.inputs}/{long}"], "data_dir"),
        ):
            with self.subTest(argv=argv):
                self.assert_rejected(argv, named)

    def test_escape_sequences_are_not_echoed(self):
        for argv, named in (
            (["train", f"--dataset=tfrecord:/no{_ESCAPE}/*"], "dataset"),
            (["data", "check", f"--dataset=no{_ESCAPE}"], "dataset"),
            (["train", f"--model=my{_ESCAPE}:build"], "model"),
            ([f"tr{_ESCAPE}"], "unknown command"),
        ):
            with self.subTest(argv=argv):
                self.assert_rejected(argv, named)
        # What TensorFlow finds (a glob that matches nothing) is echoed through the same line.
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            cli._fail(
                "train",  # pylint: disable=protected-access
                f"the pattern /no{_ESCAPE}/* matches no files",
            )
        self.assertEqual(
            stderr.getvalue(),
            "tfdist train: error: the pattern /no\\x1b[31m\\x1b]0;pwned\\x07/* matches no files\n",
        )

    def test_values_beyond_what_their_field_takes(self):
        for argv, named in (
            (
                [
                    "manifest",
                    "--format=slurm",
                    "--slurm_port_base=65535",
                    "--num_workers=4",
                    "--slurm_tasks_per_node=4",
                    "--",
                    "train",
                ],
                "slurm port: 65535 gives the 4 tasks of a node ports up to 69534",
            ),
            (["manifest", "--image=img", "--", ""], "jobset program"),
            (
                [
                    "plan",
                    "--compute_ms=100",
                    "--input_benchmark="
                    + self._write(
                        "digits.json",
                        '{"host_examples_per_core": 1%s, "decode_examples_per_core": '
                        "5}" % ("0" * 400),
                    ),
                ],
                "input_benchmark",
            ),
            (["manifest", "--format=slurm", "--time_limit=١٢", "--", "train"], "time_limit"),
            ([*_PLAN, "--num_ps=2", "--allreduce=hierarchical"], "--allreduce"),
            (["train", "--image_size=1"], "image_size"),
            (["train", "--model=resnet50", "--image_size=8"], "32x32"),
            ([*_PLAN, "--model=resnet50", "--image_size=8"], "32x32"),
        ):
            with self.subTest(argv=argv):
                self.assert_rejected(argv, named)

    def test_an_output_on_a_full_disk_before_anything_runs(self):
        with scratch_files.small_tmpfs(64) as disk:
            scratch_files.fill(disk)
            for argv, named in (
                (["train", f"--metrics_json={disk}/m.json"], "metrics_json"),
                (["data", "check", f"--json={disk}/r.json"], "json"),
                ([*_PLAN, f"--json={disk}/plan.json"], "json"),
            ):
                with self.subTest(argv=argv):
                    self.assert_rejected(argv, f"{named}='{disk}/")

    def test_a_deleted_working_directory(self):
        here = os.getcwd()
        gone = os.path.join(self.inputs, "gone")
        os.mkdir(gone)
        os.chdir(gone)
        try:
            os.rmdir(gone)
            for argv, named in (
                (["train", "--metrics_json=m.json"], "metrics_json"),
                (["train", "--model_dir=run"], "model_dir"),
                ([*_PLAN, "--json=plan.json"], "json"),
            ):
                with self.subTest(argv=argv):
                    self.assert_rejected(argv, named)
        finally:
            os.chdir(here)

    def test_a_manifest_stdout_cannot_encode(self):
        self.assert_rejected(
            [
                "manifest",
                "--format=slurm",
                "--",
                "train",
                "--dataset=tfrecord:/caf\u00e9/*",
                "--num_classes=3",
                "--model_dir=/shared/run",
            ],
            "PYTHONIOENCODING",
            stdout_encoding="ascii",
        )


def _memory_limited():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.fixture(name="after_tensorflow", scope="module")
def _after_tensorflow(tmp_path_factory):
    """The inputs only TensorFlow can judge, run one after the other in one child: {name:
    (result, what the case was given)}; each case's scratch directory starts empty."""
    scratch = tmp_path_factory.mktemp("after_tensorflow")
    for name in ("split", "records", "code"):
        (scratch / name).mkdir()
    truncated = image_example(bytes_feature(encoded_image()[:200]))
    records = write_records(
        str(scratch / "records" / "train-0"),
        [image_example(), image_example(), truncated, image_example()],
    )
    (scratch / "code" / "raising_data.py").write_text(_RAISING_DATA, encoding="utf-8")
    cases = {
        "split": (
            [
                "train",
                "--num_cpu_devices=2",
                "--global_batch_size=3",
                f"--metrics_json={scratch / 'split' / 'm.json'}",
            ],
            scratch / "split",
        ),
        "records": (
            [
                "train",
                f"--dataset=tfrecord:{records}",
                "--num_classes=3",
                "--image_size=16",
                "--global_batch_size=4",
                "--epochs=1",
                "--steps_per_epoch=1",
            ],
            records,
        ),
        "code": (
            [
                "train",
                "--dataset=python:raising_data:splits",
                "--model=raising_data:build",
                "--epochs=1",
                "--steps_per_epoch=2",
            ],
            None,
        ),
        "too_large": (["train", "--num_cpu_devices=2", "--per_replica_batch_size=16777216"], None),
        "s3_model_dir": (["train", "--model_dir=s3://bucket/run"], None),
        "features_only": (
            [
                "train",
                "--dataset=python:raising_data:features_only",
                "--model=raising_data:build",
                "--epochs=1",
                "--steps_per_epoch=2",
                "--validation_steps=1",
            ],
            None,
        ),
    }
    results = run_tfdist_cases(
        [args for args, _ in cases.values()], extra_env={"PYTHONPATH": str(scratch / "code")}
    )
    return {name: (result, given) for (name, (_, given)), result in zip(cases.items(), results)}


@pytest.mark.multiprocess
class AfterTensorFlowTest(unittest.TestCase):
    """Inputs only TensorFlow can judge (the replica count, a record's image, a dataset's own
    code), run in one shared child, and a TensorFlow that cannot load."""

    @pytest.fixture(autouse=True)
    def _results(self, after_tensorflow):
        self.results = after_tensorflow

    def test_batch_that_does_not_split_over_the_replicas(self):
        result, scratch = self.results["split"]
        assert_one_line_error(self, result, "global_batch_size=3 does not split evenly")
        self.assertEqual(os.listdir(scratch), [], "nothing may be half-written")

    def test_per_replica_batch_whose_global_batch_is_too_large(self):
        result, _ = self.results["too_large"]
        assert_one_line_error(
            self,
            result,
            "--per_replica_batch_size=16777216 over 2 replicas "
            "is a global batch of 33554432, past the largest",
        )

    def test_a_model_dir_url_tensorflow_cannot_open(self):
        result, _ = self.results["s3_model_dir"]
        assert_one_line_error(
            self, result, "--model_dir='s3://bucket/run': TensorFlow here cannot open s3://"
        )

    def test_image_that_does_not_decode_while_training(self):
        result, path = self.results["records"]
        # TensorFlow's JPEG decoder writes its own line to stderr first; ours ends the run.
        self.assertEqual(result.returncode, 2, result.stderr[-3000:])
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn(
            f"tfdist train: error: file {path}, record 2 (from 0): its image/encoded "
            "image does not decode",
            result.stderr.strip().splitlines()[-1],
        )

    def test_a_dataset_whose_python_code_raises(self):
        result, _ = self.results["code"]
        assert_one_line_error(
            self, result, "dataset function raising_data:", "RuntimeError: boom in the generator"
        )

    def test_a_dataset_plugin_whose_batches_hold_no_labels(self):
        result, _ = self.results["features_only"]
        assert_one_line_error(
            self,
            result,
            "train_data: its batches do not fit model",
            "(the batches hold no labels, so the compiled loss has nothing",
        )

    def test_tensorflow_that_cannot_load(self):
        result = subprocess.run(
            [sys.executable, "-m", "tfdist", "train"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            preexec_fn=_memory_limited,
        )
        assert_one_line_error(self, result, "TensorFlow needs at least", "ulimit -v")


_RAISING_DATA = """
import tensorflow as tf
import tf_keras


def _examples():
    yield tf.zeros((4,)), 0
    raise RuntimeError("boom in the generator")


def splits(split):
    if split != "train":
        return None
    return lambda context: tf.data.Dataset.from_generator(_examples, output_signature=(
        tf.TensorSpec((4,)), tf.TensorSpec((), tf.int32))).batch(1).repeat()


def features_only(split):
    return lambda context: tf.data.Dataset.from_tensors(tf.zeros((4,))).repeat().batch(2)


def build():
    return tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(2)])
"""


if __name__ == "__main__":
    unittest.main()
