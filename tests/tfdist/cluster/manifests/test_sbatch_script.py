"""Tests for tfdist.cluster.manifests.sbatch_script: the Slurm batch script."""

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest
from absl.testing import absltest
from absl.testing import parameterized

from tfdist.cluster import manifests
from tfdist.strategies.slurm import JOB_SLOTS
from tfdist.cluster.manifests import ManifestError
from tfdist.cluster.manifests import sbatch_script

_TRAIN_ARGS = [
    "--strategy=parameter_server",
    "--epochs=2",
    "--model_dir=/tmp/my run",
    "--dataset=tfrecord:/data/{split}-*",
    "yes",
    'it\'s "quoted" $HOME #x',
]
_PYTHON = "/opt/venv/bin/python3"
_SLURM = dict(job_name="tfdist-train", train_args=_TRAIN_ARGS, python=_PYTHON)


class SlurmTest(parameterized.TestCase):
    def _tempdir(self):
        tempdir = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        self.addCleanup(tempdir.cleanup)
        return tempdir.name

    def _write(self, text):
        path = os.path.join(self._tempdir(), "job.sbatch")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_script_header(self):
        script = manifests.slurm(
            **_SLURM, num_workers=3, num_ps=1, chief=True, time_limit="2-00:00:00"
        )
        lines = script.splitlines()
        self.assertEqual(lines[0], "#!/bin/bash")
        self.assertIn("#SBATCH --job-name=tfdist-train", lines)
        self.assertIn("#SBATCH --ntasks=5", lines)
        self.assertIn("#SBATCH --nodes=5", lines)  # One task per node unless asked otherwise.
        self.assertIn("#SBATCH --ntasks-per-node=1", lines)
        self.assertIn("#SBATCH --time=2-00:00:00", lines)
        self.assertNotIn("--gpus-per-task", script)
        self.assertIn("listens on 8888 + 1000 n + SLURM_JOB_ID mod 1000", script)  # Ports.
        self.assertIn("MpiParams=ports=...", script)
        self.assertIn("no authentication", script)
        # A preemption notice before the time limit, and back in the queue after it.
        self.assertIn("#SBATCH --signal=USR1@30", lines)
        self.assertIn("#SBATCH --requeue", lines)
        self.assertIn("#SBATCH --open-mode=append", lines)  # Every attempt's output kept.
        self.assertIn("#SBATCH --time=01:00:00", manifests.slurm(**_SLURM, num_workers=1))
        lead = manifests.slurm(**_SLURM, num_workers=1, grace_s=120).splitlines()
        self.assertIn("#SBATCH --signal=USR1@120", lead)
        self.assertIn(
            "export TFDIST_GRACE_S=120  # Each task checks its backup's save against it.", lead
        )

    def test_gpus_per_task(self):
        script = manifests.slurm(**_SLURM, num_workers=2, gpus_per_task=2)
        self.assertIn("#SBATCH --gpus-per-task=2", script.splitlines())
        self.assertIn("#SBATCH --ntasks=2", script.splitlines())

    @parameterized.named_parameters(
        ("workers", dict(num_workers=2), ["--cluster_resolver=slurm", "--slurm_port_base=8888"]),
        (
            "ps",
            dict(num_workers=2, num_ps=2, chief=True, port=7000),
            ["--cluster_resolver=slurm", "--slurm_port_base=7000", "--num_ps=2", "--chief"],
        ),
    )
    def test_srun_line_quotes_the_train_args(self, layout, flags):
        script = manifests.slurm(**_SLURM, **layout)
        srun = [line for line in script.splitlines() if line.lstrip().startswith("srun ")]
        self.assertLen(srun, 1)
        self.assertEqual(
            shlex.split(srun[0]),
            [
                "srun",
                "--kill-on-bad-exit=1",
                "--label",
                "${RESV_PORTS[@]}",
                "$PYTHON",
                "-m",
                "tfdist",
                "train",
                *flags,
                "--preemption_signal=SIGUSR1",
                *_TRAIN_ARGS,
                "--collective_timeout_s=600",
                "&",
            ],
        )

    def test_tasks_per_node_sets_the_node_count(self):
        lines = manifests.slurm(**_SLURM, num_workers=4, chief=True, tasks_per_node=2).splitlines()
        self.assertIn("#SBATCH --ntasks=5", lines)
        self.assertIn("#SBATCH --nodes=3", lines)
        self.assertIn("#SBATCH --ntasks-per-node=2", lines)

    def test_a_program_of_your_own_gets_the_slurm_flags(self):
        script = manifests.slurm(
            job_name="mine",
            train_args=None,
            num_workers=2,
            python=_PYTHON,
            program=["python", "my_train.py", "--epochs=2"],
        )
        srun = [line for line in script.splitlines() if line.lstrip().startswith("srun ")]
        self.assertEqual(
            shlex.split(srun[0]),
            [
                "srun",
                "--kill-on-bad-exit=1",
                "--label",
                "${RESV_PORTS[@]}",
                "$PYTHON",
                "my_train.py",
                "--epochs=2",
                "--collective_timeout_s=600",
                "--cluster_resolver=slurm",
                "--slurm_port_base=8888",
                "--preemption_signal=SIGUSR1",
                "&",
            ],
        )
        self.assertIn(f'PYTHON="${{TFDIST_PYTHON:-{_PYTHON}}}"', script.splitlines())

    @pytest.mark.multiprocess
    def test_bash_accepts_the_script(self):
        path = self._write(manifests.slurm(**_SLURM, num_workers=2))
        result = subprocess.run(["bash", "-n", path], capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)

    @parameterized.named_parameters(
        ("site_reserves_ports", "MpiParams               = ports=12000-12999", ["--resv-ports=2"]),
        ("site_reserves_none", "MpiParams               = (null)", []),
    )
    @pytest.mark.multiprocess
    def test_srun_gets_the_args_verbatim(self, mpi_params, resv_ports):
        """Runs the script with a fake srun that prints its arguments (nothing is expanded) and
        a fake scontrol whose config has or lacks MpiParams=ports (srun --resv-ports fails a
        step where it lacks them)."""
        bin_dir = self._tempdir()
        fakes = {
            "srun": "import json, sys\nprint(json.dumps(sys.argv[1:]))\n",
            "scontrol": f"print('MpiDefault              = none')\nprint({mpi_params!r})\n",
        }
        for name, program in fakes.items():
            fake = os.path.join(bin_dir, name)
            with open(fake, "w", encoding="utf-8") as f:
                f.write(f"#!{sys.executable}\n{program}")
            os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        path = self._write(manifests.slurm(**_SLURM, num_workers=4, tasks_per_node=2))
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "SLURM_JOB_ID": "42",
        }
        result = subprocess.run(
            ["bash", path], capture_output=True, text=True, timeout=30, env=env, cwd=bin_dir
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(
            json.loads(result.stdout.splitlines()[-1]),
            [
                "--kill-on-bad-exit=1",
                "--label",
                *resv_ports,
                _PYTHON,
                "-m",
                "tfdist",
                "train",
                "--cluster_resolver=slurm",
                "--slurm_port_base=8888",
                "--preemption_signal=SIGUSR1",
                *_TRAIN_ARGS,
                "--collective_timeout_s=600",
            ],
        )

    def test_tfdist_train_without_a_model_dir_is_refused(self):
        """Nothing would be saved, so a requeued job would start from zero, again and again."""
        with self.assertRaisesRegex(
            ManifestError,
            r"^slurm train_args: \['--epochs=2'\] names no --model_dir; pass --model_dir=DIR",
        ):
            manifests.slurm(**{**_SLURM, "train_args": ["--epochs=2"]}, num_workers=1)

    def test_a_program_is_requeued_only_with_a_model_dir(self):
        program = dict(job_name="mine", train_args=None, num_workers=1, python=_PYTHON)
        bare = manifests.slurm(**program, program=["python", "t.py"])
        self.assertIn("#SBATCH --no-requeue", bare.splitlines())
        self.assertNotIn("#SBATCH --requeue", bare.splitlines())
        self.assertNotIn("scontrol requeue", bare)
        self.assertIn("names no --model_dir, so a notice saves nothing", bare)
        saved = manifests.slurm(**program, program=["python", "t.py", "--model_dir", "/s/r"])
        self.assertIn("#SBATCH --requeue", saved.splitlines())
        self.assertIn('scontrol requeue "$job"', saved)

    def test_the_collective_timeout_is_the_users_when_given(self):
        args = [*_TRAIN_ARGS, "--collective_timeout_s=60"]
        script = manifests.slurm(**{**_SLURM, "train_args": args}, num_workers=1)
        (srun,) = [line for line in script.splitlines() if line.lstrip().startswith("srun ")]
        self.assertEqual(shlex.split(srun)[-2:], ["--collective_timeout_s=60", "&"])
        self.assertEqual(srun.count("--collective_timeout_s"), 1)

    @parameterized.named_parameters(
        ("fewer_nodes", dict(nodes=3), ["#SBATCH --ntasks=4", "#SBATCH --nodes=3"], 2),
        (
            "nodes_and_most_per_node",
            dict(nodes=2, tasks_per_node=3),
            ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=3"],
            3,
        ),
    )
    def test_uneven_layouts(self, layout, directives, most):
        kwargs = {**_SLURM, "num_workers": 2, "num_ps": 1, "chief": True, **layout}
        lines = manifests.slurm(**kwargs).splitlines()
        for directive in directives:
            self.assertIn(directive, lines)
        if "tasks_per_node" not in layout:  # Slurm lays the 4 tasks out on 3 nodes.
            self.assertFalse([line for line in lines if "--ntasks-per-node" in line])
        # The most tasks a node may run must all get ports (JOB_SLOTS each, from the job id).
        manifests.slurm(**kwargs, port=65536 - JOB_SLOTS * most)
        with self.assertRaisesRegex(ManifestError, "^slurm port: .* ports up to 65536"):
            manifests.slurm(**kwargs, port=65537 - JOB_SLOTS * most)

    @parameterized.named_parameters(
        ("more_nodes_than_tasks", dict(nodes=5), "from 1 to 4 nodes"),
        ("zero", dict(nodes=0), "from 1 to 4 nodes"),
        ("too_few_for_per_node", dict(nodes=1, tasks_per_node=2), "at least 2 nodes"),
    )
    def test_bad_node_counts(self, layout, fix):
        with self.assertRaisesRegex(ManifestError, f"^slurm_nodes: .*; .*{fix}"):
            manifests.slurm(**_SLURM, num_workers=2, num_ps=1, chief=True, **layout)

    def test_site_options(self):
        site = manifests.SlurmSite(
            partition="gpu,debug",
            account="proj-7",
            qos="high",
            mem="64G",
            cpus_per_task=8,
            exclusive=True,
            constraint="a100&ib",
            output="logs/%x-%j.out",
            sbatch_lines=("--mail-type=END", "--signal=B:USR1@90"),
            prologue=("module load cuda/12.4", "source /opt/env.sh"),
        )
        lines = manifests.slurm(**_SLURM, num_workers=1, site=site).splitlines()
        for line in (
            "#SBATCH --partition=gpu,debug",
            "#SBATCH --account=proj-7",
            "#SBATCH --qos=high",
            "#SBATCH --mem=64G",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --exclusive",
            "#SBATCH --constraint=a100&ib",
            "#SBATCH --output=logs/%x-%j.out",
            "#SBATCH --mail-type=END",
            "#SBATCH --signal=B:USR1@90",  # After the script's own --signal: sbatch takes it.
        ):
            self.assertIn(line, lines)
        self.assertLess(lines.index("#SBATCH --signal=USR1@30"), lines.index(line))
        # The prologue runs before srun, before `set -u` (module scripts read unset variables).
        self.assertLess(lines.index("set -eo pipefail"), lines.index("module load cuda/12.4"))
        self.assertLess(lines.index("source /opt/env.sh"), lines.index("set -u"))

    @parameterized.named_parameters(
        ("partition", dict(partition="a b"), "slurm_partition", '"gpu"'),
        ("account", dict(account="$(id)"), "slurm_account", '"my-project"'),
        ("qos", dict(qos=""), "slurm_qos", '"normal"'),
        ("mem", dict(mem="16 GB"), "slurm_mem", '"64G"'),
        ("mem_zero", dict(mem="0"), "slurm_mem", '"64G"'),
        ("constraint", dict(constraint="a;b"), "slurm_constraint", '"a100&ib"'),
        ("output", dict(output="a b.out"), "slurm_output", "logs/%x-%j.out"),
        ("cpus", dict(cpus_per_task=0), "slurm_cpus_per_task", "from 1 to 1024"),
        ("sbatch_owned", dict(sbatch_lines=("--time=5",)), "slurm_sbatch", "--time_limit"),
        ("sbatch_requeue", dict(sbatch_lines=("--no-requeue",)), "slurm_sbatch", "saved"),
        ("sbatch_two", dict(sbatch_lines=("--a --b",)), "slurm_sbatch", "one long sbatch"),
        ("sbatch_str", dict(sbatch_lines="--mail-type=END"), "slurm_sbatch", "sequence"),
        ("prologue", dict(prologue=("a\nb",)), "slurm_prologue", "one shell line"),
    )
    def test_bad_site_options_are_one_line(self, options, field, fix):
        with self.assertRaisesRegex(ManifestError, rf"^{field}: .*; .*{re.escape(fix)}"):
            manifests.SlurmSite(**options)

    def test_expand_vars_lets_the_shell_expand_names_only(self):
        args = ["--model_dir=runs/$SLURM_JOB_ID/${SLURM_JOB_NAME}", "--epochs=2"]
        expanded = manifests.slurm(
            **{**_SLURM, "train_args": args}, num_workers=1, expand_vars=True
        )
        self.assertIn('"--model_dir=runs/$SLURM_JOB_ID/${SLURM_JOB_NAME}" --epochs=2', expanded)
        literal = manifests.slurm(**{**_SLURM, "train_args": args}, num_workers=1)
        self.assertIn("'--model_dir=runs/$SLURM_JOB_ID/${SLURM_JOB_NAME}'", literal)
        for word in ("--x=$(id)", "--x=$A`id`", "--x=${A:-$(id)}", '--x=$A"', "--x=$1", "--x=\\$A"):
            with self.subTest(word=word):
                with self.assertRaisesRegex(
                    ManifestError, r"^slurm_expand_vars: .* holds shell syntax other than"
                ):
                    manifests.slurm(
                        **{**_SLURM, "train_args": [*_TRAIN_ARGS[:3], word]},
                        num_workers=1,
                        expand_vars=True,
                    )

    def test_a_sweep_is_an_array_of_one_task_per_combination(self):
        sweep = manifests.Sweep(grid=(("learning_rate", ("0.1", "0.3")), ("seed", ("1", "2"))))
        script = manifests.slurm(**_SLURM, num_workers=2, sweep=sweep)
        lines = script.splitlines()
        self.assertIn("#SBATCH --array=0-3", lines)
        self.assertIn("run_dir='/tmp/my run'/\"$SLURM_ARRAY_TASK_ID\"", lines)
        self.assertIn(
            "  2) sweep=(--learning_rate=0.3 --seed=1); values='"
            '{"array_task_id": 2, "flags": {"learning_rate": "0.3", "seed": "1"}}\' ;;',
            lines,
        )
        (srun,) = [line for line in lines if line.lstrip().startswith("srun ")]
        words = shlex.split(srun)
        self.assertNotIn("--model_dir=/tmp/my run", words)
        self.assertEqual(
            words[-4:],
            [
                "--model_dir=$run_dir",
                "--metrics_json=$run_dir/metrics.json",
                "${sweep[@]}",
                "&",
            ],
        )
        # The array task's own id, not the array's, which would requeue every task.
        self.assertIn('job="${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_', script)
        throttled = manifests.Sweep(grid=sweep.grid, array="1,3%1")
        self.assertIn(
            "#SBATCH --array=1,3%1", manifests.slurm(**_SLURM, num_workers=2, sweep=throttled)
        )
        plain = manifests.slurm(**_SLURM, num_workers=2, sweep=manifests.Sweep(array="0-4"))
        self.assertIn("#SBATCH --array=0-4", plain.splitlines())
        self.assertNotIn("sweep", plain.split("set -u")[1])

    @parameterized.named_parameters(
        ("not_a_spec", dict(array="x"), "slurm_array: 'x' is not an array spec"),
        ("open_range", dict(array="1-"), "slurm_array: '1-' is not an array spec"),
        ("backwards", dict(array="3-1"), "is not an array spec"),
        ("zero_step", dict(array="0-4:0"), "is not an array spec"),
        ("zero_throttle", dict(array="0-1%0"), "is not an array spec"),
        ("past_max", dict(array="0-1001"), "indexes up to 1000"),
        ("nothing", dict(), "slurm_array: None is unset and there is no sweep"),
        ("past_grid", dict(grid=(("lr", ("1", "2")),), array="0-2"), "names index 2, past"),
        ("model_dir", dict(grid=(("model_dir", ("a", "b")),)), "is set by the script"),
        ("repeated", dict(grid=(("lr", ("1", "1")),)), "repeats a flag or a value"),
    )
    def test_bad_sweeps_are_one_line(self, sweep, message):
        with self.assertRaisesRegex(ManifestError, re.escape(message)):
            manifests.Sweep(**sweep)

    def test_a_sweep_cannot_set_what_the_command_sets(self):
        sweep = manifests.Sweep(grid=(("epochs", ("1", "2")),))
        with self.assertRaisesRegex(ManifestError, "sets --epochs, which the sweep sets"):
            manifests.slurm(**_SLURM, num_workers=1, sweep=sweep)
        args = [*_TRAIN_ARGS, "--metrics_json=/tmp/m.json"]
        with self.assertRaisesRegex(ManifestError, "sets --metrics_json in an array"):
            manifests.slurm(**{**_SLURM, "train_args": args}, num_workers=1, sweep=sweep)

    @parameterized.named_parameters(
        ("job_name", dict(job_name="my job"), "slurm job_name", "'my job'", "letters, digits"),
        ("time", dict(time_limit="1h"), "slurm time_limit", "'1h'", "01:00:00"),
        ("no_workers", dict(num_workers=0), "slurm num_workers", "0", "at least 1 worker"),
        ("ps_without_chief", dict(num_ps=1), "slurm num_ps", "1", "add --chief"),
        ("port", dict(port=0), "slurm port", "0", "from 1 to 65535"),
        (
            "port_too_high",
            dict(port=64000, num_workers=2, tasks_per_node=2),
            "slurm port",
            "64000",
            "use a port of at most 63536",
        ),
        ("gpus", dict(gpus_per_task=-1), "slurm gpus_per_task", "-1", "from 0 to 1024"),
        ("tasks_per_node", dict(tasks_per_node=0), "slurm tasks_per_node", "0", "from 1 to 1024"),
        ("grace", dict(grace_s=0), "slurm grace_s", "0", "1 to 3600"),
        (
            "grace_the_whole_time_limit",
            dict(grace_s=1800, time_limit="30"),
            "slurm grace_s",
            "1800 leaves no time to train",
            "fewer seconds than the time limit's 1800 (time_limit=30), e.g. 180, or a longer",
        ),
        ("python", dict(python='/a "b"/python'), "slurm python", "'/a \"b\"/python'", "path"),
        (
            "args",
            dict(train_args=["--epochs", 2]),
            "slurm train_args",
            "['--epochs', 2]",
            "list of strings",
        ),
    )
    def test_errors_are_one_line(self, override, field, value, fix):
        kwargs = {**_SLURM, "num_workers": 1, **override}
        with self.assertRaisesRegex(
            ManifestError,
            rf"^{re.escape(field)}: "
            rf"{re.escape(value)}.*; .*{re.escape(fix)}",
        ):
            manifests.slurm(**kwargs)


class SlurmTimeTest(parameterized.TestCase):
    @parameterized.parameters(
        ("30", 1800),
        ("30:15", 1815),
        ("01:00:00", 3600),
        ("2-00", 172800),
        ("2-01:30", 178200),
        ("2-01:30:05", 178205),
        ("UNLIMITED", None),
        ("infinite", None),
    )
    def test_seconds_as_sbatch_reads_the_time(self, time_limit, seconds):
        self.assertEqual(sbatch_script.slurm_time_s(time_limit), seconds)

    def test_a_grace_just_under_the_limit_is_written(self):
        self.assertIn(
            "#SBATCH --signal=USR1@1799",
            manifests.slurm(**_SLURM, num_workers=1, grace_s=1799, time_limit="30"),
        )


_FAKE_SRUN = """#!/bin/bash
# srun as the batch shell sees it: records its arguments and the signals it gets; a notice
# (SIGUSR1) ends it with 75, as the tasks' save does (or $FAKE_NOTICE_EXIT: killed tasks);
# else it exits $FAKE_SRUN_EXIT.
printf '%s\\n' "$@" > "$FAKE_DIR/srun.args"
trap 'echo USR1 >> "$FAKE_DIR/srun.signals"; kill "$sleeper"; exit "${FAKE_NOTICE_EXIT:-75}"' USR1
trap 'echo TERM >> "$FAKE_DIR/srun.signals"; kill "$sleeper"; exit 137' TERM
sleep "${FAKE_SRUN_S:-30}" &
sleeper=$!
touch "$FAKE_DIR/srun.started"
wait "$sleeper"
exit "${FAKE_SRUN_EXIT:-0}"
"""
_FAKE_SCONTROL = """#!/bin/bash
# Records a requeue; shows the job in $FAKE_STATE (RUNNING unless set).
if [ "$1" = show ]; then echo "JobId=42 JobState=${FAKE_STATE:-RUNNING} Reason=None"; exit; fi
echo "$@" >> "$FAKE_DIR/scontrol.args"
"""


@pytest.mark.multiprocess
class BatchShellTest(parameterized.TestCase):
    """The script's own shell logic, run by bash with a fake srun and scontrol: what it does
    with a notice, srun's status and an array task's id."""

    def _run(self, script: str, env: dict, send: signal.Signals | None = None):
        """Runs `script` in bash (`send` to the batch shell once srun started); (status,
        stdout, {file: text} of what the fakes recorded, and "dir": the job's directory)."""
        tempdir = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        self.addCleanup(tempdir.cleanup)
        directory = tempdir.name
        for name, text in (("srun", _FAKE_SRUN), ("scontrol", _FAKE_SCONTROL)):
            path = os.path.join(directory, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(path, 0o755)
        path = os.path.join(directory, "job.sbatch")
        with open(path, "w", encoding="utf-8") as f:
            f.write(script)
        env = {
            **os.environ,
            "PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}",
            "FAKE_DIR": directory,
            "SLURM_JOB_ID": "42",
            **env,
        }
        for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"):
            env.setdefault(name, None)
        env = {name: value for name, value in env.items() if value is not None}
        with subprocess.Popen(  # pylint: disable=consider-using-with
            ["bash", path], env=env, cwd=directory, stdout=subprocess.PIPE, text=True
        ) as batch:
            if send is not None:
                deadline = time.monotonic() + 30
                while not os.path.exists(os.path.join(directory, "srun.started")):
                    self.assertLess(time.monotonic(), deadline, "srun never started")
                    time.sleep(0.02)
                batch.send_signal(send)
            stdout, _ = batch.communicate(timeout=60)
        recorded = {"dir": directory}
        for name in ("srun.args", "srun.signals", "scontrol.args"):
            file = os.path.join(directory, name)
            recorded[name] = open(file, encoding="utf-8").read() if os.path.exists(file) else ""
        return batch.returncode, stdout, recorded

    @parameterized.named_parameters(
        ("usr1_batch", signal.SIGUSR1),  # scancel --signal=USR1 --batch, --signal=B:USR1@T
        ("term_full", signal.SIGTERM),  # scancel --full: srun must get the notice, not TERM
    )
    def test_a_notice_to_the_batch_shell_reaches_the_tasks_and_requeues(self, sent):
        script = manifests.slurm(**_SLURM, num_workers=2)
        status, stdout, recorded = self._run(script, {"SLURM_RESTART_COUNT": "2"}, sent)
        self.assertEqual(status, 75, stdout)
        self.assertEqual(recorded["srun.signals"], "USR1\n")
        self.assertEqual(recorded["scontrol.args"], "requeue 42\n")
        self.assertIn("tfdist sbatch: job 42 starts: restart 2 (SLURM_RESTART_COUNT)", stdout)

    def test_a_notice_before_srun_starts_runs_nothing_and_requeues(self):
        # The prologue stands in for srun starting, then takes a while (`module load`).
        site = manifests.SlurmSite(prologue=('touch "$FAKE_DIR/srun.started"; sleep 0.5',))
        script = manifests.slurm(**_SLURM, num_workers=1, site=site)
        status, stdout, recorded = self._run(script, {}, signal.SIGUSR1)
        self.assertEqual(status, 75, stdout)
        self.assertEqual(recorded["srun.args"], "")
        self.assertEqual(recorded["scontrol.args"], "requeue 42\n")

    def test_a_cancelled_job_is_not_requeued(self):
        """`scancel J` sends SIGTERM to the batch shell too: the tasks save, but the job that
        Slurm is ending (JobState=COMPLETING) stays ended."""
        script = manifests.slurm(**_SLURM, num_workers=2)
        status, _, recorded = self._run(script, {"FAKE_STATE": "COMPLETING"}, signal.SIGTERM)
        self.assertEqual(status, 75)
        self.assertEqual(recorded["scontrol.args"], "")

    def test_tasks_that_srun_killed_after_a_notice_resume_from_the_last_backup(self):
        """`scancel --full --signal=TERM` reaches srun too, which kills the tasks."""
        script = manifests.slurm(**_SLURM, num_workers=2)
        status, stdout, recorded = self._run(script, {"FAKE_NOTICE_EXIT": "137"}, signal.SIGTERM)
        self.assertEqual(status, 137)
        self.assertEqual(recorded["scontrol.args"], "requeue 42\n")
        self.assertIn("srun ended 137 after SIGTERM", stdout)

    def test_an_array_task_requeues_itself_alone(self):
        sweep = manifests.Sweep(grid=(("learning_rate", ("0.1", "0.3")),))
        script = manifests.slurm(
            **{**_SLURM, "train_args": ["--model_dir=runs"]}, num_workers=1, sweep=sweep
        )
        env = {"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "1"}
        status, stdout, recorded = self._run(script, env, signal.SIGUSR1)
        self.assertEqual(status, 75, stdout)
        self.assertEqual(recorded["scontrol.args"], "requeue 40_1\n")
        args = recorded["srun.args"].splitlines()
        self.assertEqual(
            args[-3:],
            ["--model_dir=runs/1", "--metrics_json=runs/1/metrics.json", "--learning_rate=0.3"],
        )
        with open(os.path.join(recorded["dir"], "runs", "1", "sweep.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"array_task_id": 1, "flags": {"learning_rate": "0.3"}})

    def test_expanded_words_are_expanded_by_the_batch_shell_alone(self):
        args = ["--model_dir=runs/$SLURM_JOB_ID", "--note=${SLURM_JOB_ID}x", "--literal=`id`"]
        script = manifests.slurm(**{**_SLURM, "train_args": args}, num_workers=1, expand_vars=True)
        status, _, recorded = self._run(script, {"FAKE_SRUN_S": "0"})
        self.assertEqual(status, 0)
        self.assertEqual(
            recorded["srun.args"].splitlines()[-4:-1],
            ["--model_dir=runs/42", "--note=42x", "--literal=`id`"],
        )

    def test_a_failed_task_is_the_jobs_status_and_nothing_is_requeued(self):
        script = manifests.slurm(**_SLURM, num_workers=2)
        status, _, recorded = self._run(script, {"FAKE_SRUN_EXIT": "3", "FAKE_SRUN_S": "0"})
        self.assertEqual(status, 3)
        self.assertEqual(recorded["scontrol.args"], "")

    def test_a_program_without_a_model_dir_is_not_requeued(self):
        script = manifests.slurm(
            job_name="mine", train_args=None, num_workers=1, python=_PYTHON, program=["./t"]
        )
        status, _, recorded = self._run(script, {}, signal.SIGUSR1)
        self.assertEqual(status, 75)
        self.assertEqual(recorded["scontrol.args"], "")


class SecurityNoteTest(absltest.TestCase):
    def test_the_package_says_the_cluster_needs_a_private_network(self):
        doc = " ".join(manifests.__doc__.split())
        self.assertIn(
            "gRPC servers (workers, parameter servers, the chief, the tf.data service) "
            "have no authentication",
            doc,
        )
        self.assertIn("private network", doc)


if __name__ == "__main__":
    absltest.main()
