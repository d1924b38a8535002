"""`tfdist.commands.manifest` as a user runs it, and the Slurm flags of `tfdist train`."""

import contextlib
import io
import os
import sys
import subprocess
import unittest

import pytest
import yaml

from tests.tfdist.cli_runner import assert_one_line_error
from tests.tfdist.cli_runner import run_tfdist_cases
from tests.tfdist.cluster.manifests import jobset_crd
from tfdist.commands import cli
from tfdist.commands import flags as flags_lib


class _InProcess(unittest.TestCase):
    def _manifest(self, *args: str) -> subprocess.CompletedProcess:
        """`tfdist manifest ARGS` through `cli.main` in this process: writing a manifest imports
        no TensorFlow and starts nothing (the flags it parsed are unparsed when the test ends);
        its errors, which must be one line on stderr, are checked in a child (`test_errors`)."""
        stdout, stderr = io.StringIO(), io.StringIO()
        self.addCleanup(flags_lib.FLAGS.unparse_flags)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = cli.main(["tfdist", "manifest", *args])
        return subprocess.CompletedProcess(
            ["tfdist", "manifest", *args], status, stdout.getvalue(), stderr.getvalue()
        )


class LabelKeyFlagsTest(_InProcess):
    """The label keys of --node_selector and --tolerations, in this process (no child)."""

    def test_a_key_whose_prefix_is_not_a_dns_subdomain_is_a_one_line_error(self):
        for flag, field, key in (
            ("--node_selector=Bad_Prefix/pool=gpu", "node_selector", "Bad_Prefix/pool"),
            ("--tolerations=-x.example.com/gpu:NoSchedule", "tolerations", "-x.example.com/gpu"),
        ):
            with self.subTest(flag=flag):
                result = self._manifest("--image=i", flag, "--", "train")
                self.assertEqual(
                    (result.returncode, result.stdout, result.stderr),
                    (
                        2,
                        "",
                        f"tfdist manifest: error: jobset {field}: {key!r} is not a label key "
                        '([prefix/]name, e.g. "cloud.google.com/gke-accelerator"); use a label '
                        'key such as "cloud.google.com/gke-accelerator".\n',
                    ),
                )

    def test_a_key_with_a_dns_subdomain_prefix_is_written(self):
        result = self._manifest(
            "--image=i",
            "--node_selector=example.com/pool=gpu",
            "--tolerations=nvidia.com/gpu:NoSchedule",
            "--",
            "train",
        )
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        for document in yaml.safe_load_all(result.stdout):
            for job in document["spec"]["replicatedJobs"]:
                pod = job["template"]["spec"]["template"]["spec"]
                self.assertEqual(pod["nodeSelector"], {"example.com/pool": "gpu"})
                self.assertEqual(pod["tolerations"][0]["key"], "nvidia.com/gpu")


class SlurmFlagsTest(_InProcess):
    """The flags of `tfdist manifest --format=slurm`, in this process (no child)."""

    def test_site_options_layout_and_sweep_from_the_command_line(self):
        result = self._manifest(
            "--format=slurm",
            "--num_workers=3",
            "--num_ps=1",
            "--chief",
            "--slurm_nodes=3",
            "--time_limit=04:00:00",
            "--slurm_partition=gpu",
            "--slurm_account=proj",
            "--slurm_qos=high",
            "--slurm_mem=64G",
            "--slurm_cpus_per_task=8",
            "--slurm_exclusive",
            "--slurm_constraint=a100",
            "--slurm_output=logs/%x-%A_%a.out",
            "--slurm_sbatch=--mail-type=END",
            "--slurm_prologue=module load cuda/12.4",
            "--slurm_sweep=learning_rate=0.1,0.3",
            "--slurm_sweep=seed=1,2",
            "--slurm_array=0-3%2",
            "--slurm_expand_vars",
            "--",
            "train",
            "--strategy=parameter_server",
            "--model_dir=/shared/$USER/run",
        )
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        lines = result.stdout.splitlines()
        for line in (
            "#SBATCH --ntasks=5",
            "#SBATCH --nodes=3",
            "#SBATCH --time=04:00:00",
            "#SBATCH --array=0-3%2",
            "#SBATCH --partition=gpu",
            "#SBATCH --account=proj",
            "#SBATCH --qos=high",
            "#SBATCH --mem=64G",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --exclusive",
            "#SBATCH --constraint=a100",
            "#SBATCH --output=logs/%x-%A_%a.out",
            "#SBATCH --mail-type=END",
            "module load cuda/12.4",
            'run_dir="/shared/$USER/run"/"$SLURM_ARRAY_TASK_ID"',
        ):
            self.assertIn(line, lines)
        self.assertFalse([line for line in lines if "--ntasks-per-node" in line])
        self.assertIn("  3) sweep=(--learning_rate=0.3 --seed=2);", result.stdout)

    def test_bad_slurm_flags_are_one_line(self):
        train = ["--", "train", "--model_dir=x"]
        for args, expected in (
            (["--slurm_partition=a b", *train], "slurm_partition: 'a b' is not what Slurm takes"),
            (["--slurm_nodes=x", *train], "--slurm_nodes='x' is not a node count"),
            (["--slurm_nodes=9", *train], "slurm_nodes: 9 is not a node count for the job"),
            (["--slurm_sbatch=--ntasks=9", *train], "use --num_workers, --num_ps and --chief"),
            (["--slurm_sweep=lr", *train], "slurm_sweep: 'lr' is not flag=values"),
            (["--slurm_sweep=learning_rat=1,2", *train], "is not a flag of `tfdist train`"),
            (["--slurm_array=0-9", "--slurm_sweep=seed=1,2", *train], "past the sweep's 2"),
            (["--slurm_partition=gpu", "--", "train"], "names no --model_dir"),
        ):
            with self.subTest(args=args):
                result = self._manifest("--format=slurm", *args)
                self.assertEqual(result.returncode, 2, result.stdout)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertIn(expected, result.stderr)
        result = self._manifest("--slurm_partition=gpu", "--image=i", "--", "train")
        self.assertIn("--slurm_partition is for --format=slurm", result.stderr)


@pytest.mark.multiprocess
class ManifestCommandTest(_InProcess):
    """`tfdist manifest` and the Slurm flags of `tfdist train`, as a user runs them."""

    def test_jobset_by_default(self):
        result = self._manifest(
            "--image=me/tfdist:1",
            "--num_workers=2",
            "--num_ps=1",
            "--chief",
            "--evaluator",
            "--volume_claim=runs",
            "--max_restarts=2",
            "--gpus_per_task=1",
            "--queue=team-a",
            "--node_selector=pool=gpu",
            "--tolerations=nvidia.com/gpu:NoSchedule",
            "--cpu=4",
            "--memory=16Gi",
            "--",
            "train",
            "--strategy=parameter_server",
            "--model_dir=/mnt/tfdist/run1",
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        document = yaml.safe_load(result.stdout)
        jobset_crd.validator().validate(document)
        self.assertEqual(jobset_crd.webhook_problems(document), [])
        self.assertEqual(
            [job["name"] for job in document["spec"]["replicatedJobs"]],
            ["chief", "worker", "ps", "evaluator"],
        )
        self.assertEqual(document["spec"]["failurePolicy"]["maxRestarts"], 2)

    def test_a_program_after_the_dashes(self):
        result = self._manifest(
            "--image=me/tfdist:1", "--working_dir=/app", "--", "python", "my_train.py", "--epochs=3"
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        (worker,) = yaml.safe_load(result.stdout)["spec"]["replicatedJobs"]
        (container,) = worker["template"]["spec"]["template"]["spec"]["containers"]
        self.assertEqual(
            container["command"],
            ["python", "my_train.py", "--epochs=3", "--collective_timeout_s=600"],
        )
        self.assertEqual(container["workingDir"], "/app")

    def test_what_a_cluster_would_not_give_a_program_is_refused(self):
        for args, expected in (
            (
                ["--", "python", "my_train.py"],
                "'my_train.py' is a relative path and the container's working directory is unset",
            ),
            (
                ["--max_restarts=1", "--", "python", "/app/t.py", "--model_dir=/tmp/run"],
                "max_restarts: 1 needs a model_dir every pod shares, not '/tmp/run'",
            ),
            (
                ["--evaluator", "--", "python", "/app/t.py"],
                "evaluator: True needs a model_dir every pod shares, and the program names no",
            ),
            (
                ["--", "python", "/app/t.py", "--model_dir", "/mnt/tfdist/r"],
                "'/mnt/tfdist/r' is under mount_path /mnt/tfdist, where no volume is mounted",
            ),
            (["--", "train", "--model_dir=/mnt/tfdist/r"], "where no volume is mounted"),
        ):
            with self.subTest(args=args):
                result = self._manifest("--image=me/tfdist:1", *args)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertIn(expected, result.stderr)
        result = self._manifest(
            "--image=me/tfdist:1",
            "--max_restarts=1",
            "--volume_claim=runs",
            "--deadline_s=7200",
            "--",
            "python",
            "/app/t.py",
            "--model_dir=/mnt/tfdist/r",
            "--collective_timeout_s=60",
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        (worker,) = yaml.safe_load(result.stdout)["spec"]["replicatedJobs"]
        job = worker["template"]["spec"]
        self.assertEqual(job["activeDeadlineSeconds"], 7200)
        self.assertEqual(  # The program's own timeout stays, alone.
            job["template"]["spec"]["containers"][0]["command"][-1], "--collective_timeout_s=60"
        )

    def test_tfjob_from_the_command_line(self):
        result = self._manifest(
            "--format=tfjob",
            "--image=me/tfdist:1",
            "--num_workers=2",
            "--num_ps=1",
            "--chief",
            "--",
            "train",
            "--strategy=parameter_server",
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        for text in (
            "kind: TFJob",
            "Chief:",
            "Worker:",
            "PS:",
            "replicas: 2",
            '- "--strategy=parameter_server"',
        ):
            self.assertIn(text, result.stdout)

    def test_slurm_from_the_command_line(self):
        result = self._manifest(
            "--format=slurm",
            "--num_workers=2",
            "--slurm_port_base=9000",
            "--",
            "train",
            "--epochs=5",
            "--model_dir=/shared/run",
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(
            'srun --kill-on-bad-exit=1 --label "${RESV_PORTS[@]}" "$PYTHON" -m tfdist train '
            "--cluster_resolver=slurm --slurm_port_base=9000 --preemption_signal=SIGUSR1 "
            "--epochs=5 --model_dir=/shared/run --collective_timeout_s=600 &",
            result.stdout,
        )
        self.assertIn(f'PYTHON="${{TFDIST_PYTHON:-{sys.executable}}}"', result.stdout)

    def test_errors(self):
        # Every case in one child (fds 1 and 2 captured per case): the last one alone imports
        # TensorFlow. Outside a Slurm job: no SLURM_ variable reaches any case.
        outside_slurm = {name: "" for name in os.environ if name.startswith("SLURM_")}
        (
            no_image,
            no_command,
            queue_with_slurm,
            tfjob_program,
            restarts_without_volume,
            uneven_batch,
            per_replica,
            ps_without_slurm,
            slurm_resolver,
        ) = run_tfdist_cases(
            [
                ["manifest", "--num_workers=2", "--", "train"],
                ["manifest", "--format=slurm"],
                ["manifest", "--format=slurm", "--queue=q", "--", "train"],
                ["manifest", "--format=tfjob", "--image=i", "--", "python", "x.py"],
                [
                    "manifest",
                    "--image=i",
                    "--max_restarts=1",
                    "--",
                    "train",
                    "--model_dir=/tmp/run",
                ],
                [
                    "manifest",
                    "--format=slurm",
                    "--num_workers=3",
                    "--",
                    "train",
                    "--global_batch_size=128",
                    "--model_dir=/s/r",
                ],
                [
                    "manifest",
                    "--format=slurm",
                    "--num_workers=3",
                    "--",
                    "train",
                    "--per_replica_batch_size=32",
                    "--model_dir=/s/r",
                ],  # 96 in all: it always splits.
                ["train", "--num_ps=1"],
                ["train", "--cluster_resolver=slurm"],
            ],
            extra_env=outside_slurm,
        )
        assert_one_line_error(self, no_image, "pass --image=IMAGE")
        assert_one_line_error(self, no_command, "manifest needs the command after `--`")
        assert_one_line_error(
            self, queue_with_slurm, "--queue is for --format=jobset, not --format=slurm"
        )
        assert_one_line_error(self, tfjob_program, "--format=jobset for a program of your own")
        assert_one_line_error(
            self,
            restarts_without_volume,
            "jobset max_restarts: 1 needs a model_dir every pod shares",
        )
        assert_one_line_error(
            self, uneven_batch, "--global_batch_size=128 does not split evenly over 3 replicas"
        )
        self.assertEqual(per_replica.returncode, 0, per_replica.stderr)
        self.assertIn("--per_replica_batch_size=32", per_replica.stdout)
        assert_one_line_error(
            self,
            ps_without_slurm,
            "--num_ps given, but this task's cluster is none (one process), not a Slurm job step's",
        )
        assert_one_line_error(self, slurm_resolver, "Slurm cluster")


if __name__ == "__main__":
    unittest.main()
