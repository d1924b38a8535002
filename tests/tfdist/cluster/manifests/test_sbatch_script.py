"""Tests for tfdist.cluster.manifests.sbatch_script: the Slurm batch script."""

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile

import pytest
from absl.testing import absltest
from absl.testing import parameterized

from tfdist.cluster import manifests
from tfdist.cluster.manifests import ManifestError

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
        srun = [line for line in script.splitlines() if line.startswith("srun ")]
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
        srun = [line for line in script.splitlines() if line.startswith("srun ")]
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
                "--cluster_resolver=slurm",
                "--slurm_port_base=8888",
                "--preemption_signal=SIGUSR1",
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
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        result = subprocess.run(
            ["bash", path], capture_output=True, text=True, timeout=30, env=env, cwd=bin_dir
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(
            json.loads(result.stdout),
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
            ],
        )

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
