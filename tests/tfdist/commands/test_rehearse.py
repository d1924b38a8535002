"""`tfdist rehearse` as a user runs it: manifests `tfdist manifest` wrote, run on emulated hosts
(one network namespace per pod or Slurm node, on a private bridge), every wait bounded.

Needs root and network namespaces; skipped where this machine refuses them."""

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

import pytest
import yaml

from tests import cloud_storage
from tests.tfdist.cli_runner import MLP_PROGRAM
from tests.tfdist.cli_runner import digests
from tests.tfdist.cluster.manifests import jobset_crd
from tests.tfdist.cli_runner import run_tfdist
from tests.tfdist.cluster.rehearsal.emulated_hosts import emulated_hosts_or_skip
from tests.tfdist.cluster.rehearsal.emulated_hosts import real_slurm_or_skip
from tests.tfdist.cluster.rehearsal.emulated_hosts import our_namespaces
from tfdist.cluster import capacity
from tfdist.cluster import manifests
from tfdist.cluster.rehearsal import pod_limits
from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.commands import cli
from tfdist.commands import flags as flags_lib

TIMEOUT_S = 300
# Runs `tfdist rehearse ARGV[2:]` in this process with each --preempt's seconds counted from the
# moment its pod's last line holds ARGV[1], not from the pod's start: the pod is deleted where
# the test wants it (the program holds there until the notice), however long its TensorFlow
# import and first epoch take on a busy machine, and without waiting out a fixed time.
_REHEARSE_PREEMPTING_FROM_A_LINE = """
import sys
from tfdist.cluster.rehearsal import jobset_run
from tfdist.commands import cli

line, preempt = sys.argv[1], jobset_run._Run._preempt

def preempt_from_the_line(self, running, by_name, now):
    seen = self.__dict__.setdefault("line_seen", set())
    for member in running:
        if member.name not in seen:
            self.first_started[member.name] = now  # Not due before the line.
            if line in member.last_line:
                seen.add(member.name)
    preempt(self, running, by_name, now)

jobset_run._Run._preempt = preempt_from_the_line
sys.exit(cli.main(["tfdist", "rehearse", *sys.argv[2:]]))
"""
# How long after a cut link every other pod may take to end, beyond --collective_timeout_s:
# TensorFlow's coordination service notices a silent task within its 10 s heartbeat timeout,
# and the process then takes a few seconds to end on 2 cores, more on a busy machine; a pod that
# never noticed would run on to the rehearsal's TIMEOUT_S, minutes later.
LOST_PEER_MARGIN_S = 110


def write_manifest(test: unittest.TestCase, path: str, *args: str) -> str:
    """Writes to `path` what `tfdist manifest ARGS` prints, run through `cli.main` in this
    process: writing a manifest imports no TensorFlow and starts nothing, so it needs no child
    (the flags it parsed are unparsed when `test` ends); a JobSet is first checked as
    Kubernetes would (`jobset_crd`). Returns `path`."""
    stdout, stderr = io.StringIO(), io.StringIO()
    test.addCleanup(flags_lib.FLAGS.unparse_flags)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = cli.main(["tfdist", "manifest", *args])
    test.assertEqual(status, 0, f"tfdist manifest {' '.join(args)}: {stderr.getvalue()}")
    if "--format=slurm" not in args:  # What Kubernetes would accept, as it is.
        document = yaml.safe_load(stdout.getvalue())
        jobset_crd.validator().validate(document)
        test.assertEqual(jobset_crd.webhook_problems(document), [])
    with open(path, "w", encoding="utf-8") as manifest:
        manifest.write(stdout.getvalue())
    return path


def _log(log_dir: str, pod: str) -> str:
    with open(os.path.join(log_dir, f"{pod}.log"), encoding="utf-8") as log:
        return log.read()


@pytest.mark.multiprocess
@pytest.mark.usefixtures("rehearsals_side_by_side")
class RehearseTest(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path, small_shapes_data_dir):
        emulated_hosts_or_skip()
        self.dir, self.data_dir = str(tmp_path), small_shapes_data_dir
        self.log_dir = os.path.join(self.dir, "logs")
        self.mount = os.path.join(self.dir, "mnt")  # The claim's mount path in every pod.

    def _manifest(self, *args: str, name: str = "job.yaml") -> str:
        image = [] if "--format=slurm" in args else ["--image=local"]
        return write_manifest(self, os.path.join(self.dir, name), *image, *args)

    def _train(self, *flags: str) -> list[str]:
        # The built-in dataset, each pod reading its own files; no augmentation, which no
        # property here needs and which every pod that reads would compile.
        return [f"--data_dir={self.data_dir}", "--global_batch_size=32", "--augment=none", *flags]

    def _rehearse(self, path: str, *flags: str) -> subprocess.CompletedProcess:
        start = time.monotonic()
        result = run_tfdist(
            "rehearse",
            f"--log_dir={self.log_dir}",
            f"--timeout_s={TIMEOUT_S}",
            *flags,
            path,
            timeout_s=TIMEOUT_S + 60,
        )
        self.seconds = time.monotonic() - start
        print(f"rehearsal of {os.path.basename(path)}: {self.seconds:.1f} s")
        return result

    def _start(self, path: str) -> subprocess.Popen:
        return subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "tfdist",
                "rehearse",
                f"--log_dir={self.log_dir}",
                f"--timeout_s={TIMEOUT_S}",
                path,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def assert_done(self, result: subprocess.CompletedProcess, pods: int) -> None:
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-3000:])
        self.assertRegex(
            result.stdout,
            rf"tfdist rehearse: JobSet \S+ done: {pods} pod\(s\) "
            r"exited 0",
        )
        self.assertEqual(our_namespaces_of_any_rehearsal(), [])

    def _rehearse_preempting(self, pod: str, path: str) -> subprocess.CompletedProcess:
        """`tfdist rehearse PATH`, preempting `pod` 1 s after it says it holds at epoch 2."""
        return subprocess.run(
            [
                sys.executable,
                "-c",
                _REHEARSE_PREEMPTING_FROM_A_LINE,
                "holding at epoch 2 until a preemption notice",
                f"--log_dir={self.log_dir}",
                f"--timeout_s={TIMEOUT_S}",
                f"--preempt={pod}@1",
                path,
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S + 60,
            check=False,
            env={name: value for name, value in os.environ.items() if name != "TF_CONFIG"},
        )

    def test_a_preempted_pod_saves_and_the_jobset_restarts_without_spending_max_restarts(self):
        # A user's program (not `tfdist train`) on a multi-worker mirrored pod, which finds its
        # cluster in the JobSet pod's environment by itself. A spot reclaim deletes the pod
        # mid-epoch: SIGTERM, SIGKILL after its grace. It saves at one step and exits 75,
        # which the Job's pod failure policy takes for a preemption: the JobSet restarts with
        # maxRestarts 0 left unspent and the pod resumes at the next step. (Workers agreeing
        # on one step: tests/tfdist/training/test_preemption.py; a pod killed outright restarts
        # the JobSet against maxRestarts: tests/tfdist/cluster/test_supervision.py.)
        model_dir = os.path.join(self.mount, "run")
        metrics = os.path.join(model_dir, "metrics.json")
        path = self._manifest(
            "--name=prem",
            "--num_workers=1",
            "--max_restarts=0",
            "--grace_s=60",
            "--volume_claim=runs",
            f"--mount_path={self.mount}",
            "--",
            sys.executable,
            MLP_PROGRAM,
            "--strategy=multi_worker_mirrored",
            "--epochs=3",
            "--hold_at_epoch=2",
            f"--model_dir={model_dir}",
            f"--metrics_json={metrics}",
        )
        result = self._rehearse_preempting("prem-worker-0-0", path)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output[-5000:])
        self.assertIn("holding at epoch 2 until a preemption notice", output)
        self.assertIn(
            "preempting pod prem-worker-0-0 as a spot reclaim or Kueue deletes it: SIGTERM, "
            "SIGKILL after its grace period (60 s)",
            output,
        )
        self.assertRegex(
            output,
            r"\[prem-worker-0-0\] mlp_with_digest\.py: preempted at epoch 2 step 1; "
            r"state saved in [0-9.]+ s",
        )
        self.assertIn(
            "prem-worker-0-0 exited with status 75; its Job failed by PodFailurePolicy; "
            "restarting JobSet prem, every pod, without spending maxRestarts",
            output,
        )
        self.assertEqual(output.count("resuming at epoch 2 step 2"), 1, output[-5000:])
        self.assertIn("JobSet prem done: 1 pod(s) exited 0", output)
        self.assertEqual(len(digests(result.stdout)), 1, output[-3000:])
        with open(
            os.path.join(self.log_dir, "volumes", "runs", "run", "metrics.json"), encoding="utf-8"
        ) as metrics_file:
            history = json.load(metrics_file)["history"]
        self.assertEqual(
            {name: len(values) for name, values in history.items()},
            {"loss": 3},
            "the metrics history holds every epoch, before the preemption and after",
        )
        self.assertEqual(our_namespaces_of_any_rehearsal(), [])

    @cloud_storage.skip_unless_available
    def test_a_gs_model_dir_without_a_volume_is_served_by_an_emulated_cloud_storage(self):
        # The pods have no route out: gs://bkt is an emulated Cloud Storage at Google's names.
        # The last worker is deleted mid-epoch 2; both save into the bucket, and the restarted
        # pods, each with a fresh disk, resume from it.
        path = self._manifest(
            "--name=gcs",
            "--num_workers=2",
            "--grace_s=60",
            "--",
            sys.executable,
            MLP_PROGRAM,
            "--strategy=multi_worker_mirrored",
            "--epochs=3",
            "--hold_at_epoch=2",
            "--model_dir=gs://bkt/run",
        )
        result = self._rehearse_preempting("gcs-worker-0-1", path)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output[-5000:])
        kept = os.path.join(self.log_dir, "cloud-storage")
        self.assertIn(
            "tfdist rehearse: gs://bkt served by an emulated Cloud Storage (the pods have no "
            f"route out); its data in {kept}\n",
            output,
        )
        self.assertIn("preempting pod gcs-worker-0-1", output)
        self.assertRegex(
            output,
            r"\[gcs-worker-0-1\] mlp_with_digest\.py: preempted at epoch 2 step 1; state saved "
            r"in [0-9.]+ s under --model_dir='gs://bkt/run'",
        )
        self.assertIn("restarting JobSet gcs, every pod, without spending maxRestarts", output)
        self.assertEqual(output.count("resuming at epoch 2 step 2"), 2, output[-5000:])
        self.assertIn("JobSet gcs done: 2 pod(s) exited 0", output)
        weights = digests(result.stdout)
        self.assertEqual(len(weights), 2, output[-3000:])
        self.assertEqual(len(set(weights.values())), 1, "both workers end with the same weights")
        objects = cloud_storage.kept_objects(kept, "bkt", "run/")
        for name in ("history.json", "cluster.json", "checkpoints/epoch-003.index"):
            self.assertIn(f"run/{name}", objects)
        self.assertNotIn("run/.tfdist.lock", objects)  # Released by the run that ended.
        self.assertEqual(os.listdir(os.path.join(self.log_dir, "volumes")), [])
        with open(os.path.join(kept, "emulator.log"), encoding="utf-8") as log:
            self.assertNotIn("the emulator failed", log.read())
        self.assertEqual(our_namespaces_of_any_rehearsal(), [])

    def test_parameter_server_with_an_evaluator(self):
        model_dir = os.path.join(self.mount, "ctr")
        path = self._manifest(
            "--name=ctr",
            "--num_workers=2",
            "--num_ps=1",
            "--chief",
            "--evaluator",
            "--volume_claim=runs",
            f"--mount_path={self.mount}",
            "--",
            "train",
            *self._train(
                "--strategy=parameter_server",
                "--epochs=2",
                "--steps_per_epoch=4",
                "--validation_steps=2",
                f"--model_dir={model_dir}",
            ),
        )
        result = self._rehearse(path)
        self.assert_done(result, 2)  # The chief and the evaluator; the rest are stopped.
        self.assertIn(
            "done: 2 pod(s) exited 0, stopped ctr-worker-0-0, ctr-worker-0-1, ctr-ps-0-0 in ",
            result.stdout,
            "the workers and the ps serve until the JobSet is done",
        )
        self.assertRegex(
            _log(self.log_dir, "ctr-evaluator-0-0"),
            r"evaluator done after [12] evaluation\(s\)",
            "the evaluator pod ends once it has evaluated the last checkpoint",
        )
        with open(
            os.path.join(self.log_dir, "volumes", "runs", "ctr", "evaluations.json"),
            encoding="utf-8",
        ) as evaluations:
            # It read the chief's checkpoints through the volume; it skips one that a newer
            # replaced before it looked, but always evaluates the last.
            self.assertIn(
                "epoch-002",
                json.load(evaluations),
                "the evaluator evaluates the chief's last checkpoint",
            )
        self.assertFalse(os.path.exists(self.mount), "the mount point made was not removed")

    def test_the_data_service_pods_feed_the_multi_worker_mirrored_workers(self):
        path = self._manifest(
            "--name=ds",
            "--num_workers=2",
            "--data_service_workers=2",
            "--",
            "train",
            *self._train(
                "--strategy=multi_worker_mirrored",
                "--epochs=1",
                "--steps_per_epoch=3",
                "--validation_steps=1",
            ),
        )
        result = self._rehearse(path)
        self.assert_done(result, 2)
        self.assertIn(
            "done: 2 pod(s) exited 0, stopped ds-dispatcher-0-0, ds-data-worker-0-0, "
            "ds-data-worker-0-1 in ",
            result.stdout,
            "the data-service pods serve until the JobSet is done",
        )
        for index in (0, 1):
            self.assertIn(
                "runs on the tf.data service at grpc://ds-dispatcher-0-0.ds:2222",
                _log(self.log_dir, f"ds-worker-0-{index}"),
                f"worker {index}'s input runs on the dispatcher pod, by its JobSet name",
            )
            self.assertIn(
                "worker of the dispatcher at ds-dispatcher-0-0.ds:2222, reached at "
                f"ds-data-worker-0-{index}.ds:2222",
                _log(self.log_dir, f"ds-data-worker-0-{index}"),
                f"data-service pod {index} joins the dispatcher pod, by its own name",
            )

    def test_a_cut_link_ends_every_other_pod_with_one_line_naming_the_lost_peer(self):
        timeout_s = 10
        # Synthetic data: what is read does not matter here, only that the pods train.
        path = self._manifest(
            "--name=cut",
            "--num_workers=2",
            "--",
            "train",
            "--strategy=multi_worker_mirrored",
            "--dataset=synthetic",
            "--num_classes=10",
            "--global_batch_size=32",
            "--epochs=100",
            "--steps_per_epoch=20",
            f"--collective_timeout_s={timeout_s}",
        )
        rehearsal = self._start(path)
        lines, cut_at = [], None
        with _stopped_at_the_end(rehearsal):
            for line in rehearsal.stdout:
                lines.append(line)
                # Once both pods have run a whole epoch of collectives together.
                if cut_at is None and line.startswith("[cut-worker-0-0] Epoch 2/"):
                    namespace = re.search(
                        r"started cut-worker-0-1 .*\(netns (\S+)\)", "".join(lines)
                    ).group(1)
                    subprocess.run(
                        ["ip", "-n", namespace, "link", "set", "eth0", "down"],
                        check=True,
                        timeout=30,
                    )
                    cut_at = time.monotonic()
            status = rehearsal.wait(timeout=TIMEOUT_S)
        ended_after_s = time.monotonic() - cut_at
        output = "".join(lines)
        print(f"every pod ended {ended_after_s:.1f} s after the cut")
        self.assertNotEqual(status, 0)
        self.assertLess(ended_after_s, timeout_s + LOST_PEER_MARGIN_S, output[-3000:])
        # Both sides of the cut lose their peer; the first to notice fails the JobSet, and
        # the rehearsal then stops the other.
        # Its closing line names the failure and its cause, the pod's last line.
        first = re.search(
            r"JobSet cut failed after 0 restart\(s\) \(maxRestarts 0\): cut-worker-0-([01]) "
            r'exited with status 1 \(its last line: "tfdist train: error: lost peer worker:',
            output,
        )
        self.assertIsNotNone(first, output[-3000:])
        index = int(first.group(1))
        log = _log(self.log_dir, f"cut-worker-0-{index}")
        errors = [line for line in log.splitlines() if "error" in line]
        self.assertEqual(len(errors), 1, log[-3000:])
        self.assertTrue(
            errors[0].startswith(
                f"tfdist train: error: lost peer worker:{1 - index} "
                f"at cut-worker-0-{1 - index}.cut:2222"
            ),
            errors[0],
        )
        self.assertNotIn("Traceback", log)

    def test_the_slurm_script_on_real_slurm(self):
        real_slurm_or_skip()
        path = self._manifest(
            "--format=slurm",
            "--name=sl",
            "--num_workers=3",
            "--slurm_tasks_per_node=2",
            "--",
            "train",
            "--strategy=multi_worker_mirrored",
            "--dataset=synthetic",
            "--num_classes=10",
            "--epochs=1",
            "--steps_per_epoch=3",
            "--global_batch_size=48",
            f"--model_dir={self.dir}/run",
            name="job.sbatch",
        )
        result = self._rehearse(path)
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-3000:])
        self.assertRegex(
            result.stdout,
            r"tfdist rehearse: Slurm job sl on real Slurm \(slurm-wlm [\d.]+: slurmctld and 2 "
            r"slurmd on emulated hosts node1, node2\)",
        )
        self.assertRegex(
            result.stdout, r"Slurm job sl \(job \d+\) COMPLETED, exit code 0, on real Slurm with 2"
        )
        for rank in range(3):
            self.assertRegex(
                result.stdout,
                rf"(?m)^{rank}: tfdist: multi_worker_mirrored on 3 replica\(s\) in all \(3 workers",
            )
        self.assertEqual(our_namespaces_of_any_rehearsal(), [])


@pytest.mark.multiprocess
@pytest.mark.usefixtures("rehearsals_side_by_side")
class SandboxTest(unittest.TestCase):
    """A pod (a shell, no TensorFlow) that tries to touch the host, as root."""

    def test_a_pod_cannot_touch_the_host(self):
        emulated_hosts_or_skip()
        scratch = tempfile.mkdtemp(prefix="tfdist-sandbox-")
        self.addCleanup(shutil.rmtree, scratch)
        outside, mount = os.path.join(scratch, "outside"), os.path.join(scratch, "mnt")
        os.mkdir(outside)
        namespace = f"tfdist-sandbox-probe-{os.getpid()}"
        self.addCleanup(
            subprocess.run,
            ["ip", "netns", "delete", namespace],
            capture_output=True,
            check=False,
            timeout=30,
        )
        sleeper = subprocess.Popen(["sleep", "600"])  # pylint: disable=consider-using-with
        self.addCleanup(sleeper.wait, timeout=60)
        self.addCleanup(sleeper.kill)
        probe = os.path.join(scratch, "probe.sh")
        ip, mount_tool, kill, unshare, head, grep = (
            shutil.which(tool) for tool in ("ip", "mount", "kill", "unshare", "head", "grep")
        )
        with open(probe, "w", encoding="utf-8") as script:
            script.write(
                textwrap.dedent(f"""\
                read hostname < /proc/sys/kernel/hostname
                echo "hostname $hostname cwd $(pwd) PATH $PATH"
                [ -e /run/netns ] || echo "no /run/netns"
                echo pod > /etc/tfdist-sandbox-probe && echo "wrote /etc"
                echo pod > {outside}/from-pod && echo "wrote outside"
                {ip} netns add {namespace} 2>/dev/null || echo "netns refused"
                {mount_tool} -t tmpfs none {outside} 2>/dev/null || echo "mount refused"
                {kill} -9 {sleeper.pid} 2>/dev/null || echo "kill refused"
                echo pod > {mount}/from-pod && echo "wrote the volume"
                {unshare} -Urm {mount_tool} -t tmpfs none /mnt 2>/dev/null || echo "userns refused"
                read -r shadow < /etc/shadow; [ -z "$shadow" ] && echo "shadow masked"
                {head} -c 300000000 /dev/zero > /big 2>/dev/null || echo "layer full"
                {grep} -q ':pids:/tfdist-pod-probe-' /proc/self/cgroup && echo "pids counted"
                """)
            )
        path = write_manifest(
            self,
            os.path.join(scratch, "job.yaml"),
            "--image=local",
            "--name=probe",
            "--num_workers=1",
            "--memory=256Mi",  # Its writable layer's bound.
            "--volume_claim=runs",
            f"--mount_path={mount}",
            "--",
            "/bin/sh",
            probe,
        )
        with open(path, encoding="utf-8") as manifest:
            document = yaml.safe_load(manifest)
        container = document["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "containers"
        ][0]
        container["workingDir"] = f"{scratch}/not/there"
        container["env"].append({"name": "PATH", "value": "/nonexistent"})  # No tools on it.
        with open(path, "w", encoding="utf-8") as manifest:
            yaml.safe_dump(document, manifest)
        mounts_before = _host_mounts()
        result = run_tfdist(
            "rehearse", f"--log_dir={scratch}/logs", "--timeout_s=60", path, timeout_s=120
        )
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn(
            f"[probe-worker-0-0] hostname probe-worker-0-0 cwd {scratch}/not/there "
            "PATH /nonexistent",
            result.stdout,
            "the pod has its own name, its workingDir (made in its own file "
            "system), and its own PATH, which the rehearsal's tools do not need",
        )
        for line in (
            "no /run/netns",
            "wrote /etc",
            "wrote outside",
            "netns refused",
            "mount refused",
            "kill refused",
            "wrote the volume",
            "userns refused",
            "shadow masked",
            "layer full",
            *(["pids counted"] if pod_limits._own_pids_cgroup() else []),  # pylint: disable=protected-access
        ):
            self.assertIn(f"[probe-worker-0-0] {line}\n", result.stdout)
        self.assertFalse(os.path.exists("/etc/tfdist-sandbox-probe"), "the pod wrote /etc")
        self.assertEqual(os.listdir(outside), [], "the pod wrote outside its volume")
        self.assertFalse(os.path.exists(f"{scratch}/not"), "the workingDir was made here")
        self.assertNotIn(
            namespace,
            subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30
            ).stdout,
        )
        self.assertIsNone(sleeper.poll(), "the pod killed a process of the host")
        self.assertEqual(_host_mounts(), mounts_before)
        with open(f"{scratch}/logs/volumes/runs/from-pod", encoding="utf-8") as written:
            self.assertEqual(written.read(), "pod\n", "the volume is this machine's directory")
        self.assertEqual(
            sorted(os.listdir(f"{scratch}/logs")),
            ["probe-worker-0-0.log", "volumes"],
            "the pods' sandboxes are removed",
        )


def _host_mounts() -> list[str]:
    """This machine's mount points, less the network namespaces other tests' rehearsals hold."""
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        return sorted(
            line.split()[4] for line in mountinfo if not line.split()[4].startswith("/run/netns/")
        )


@pytest.mark.multiprocess
class CleanUpTest(unittest.TestCase):
    """Pods that sleep (no TensorFlow): the rehearsal stopped by a signal, or killed."""

    @pytest.fixture(autouse=True)
    def _scratch(self, tmp_path):
        emulated_hosts_or_skip()
        self.dir = str(tmp_path)
        self.path = write_manifest(
            self,
            os.path.join(self.dir, "sleep.yaml"),
            "--image=local",
            "--name=sleep",
            "--num_workers=2",
            "--",
            "sleep",
            "600",
        )

    def _start(self) -> subprocess.Popen:
        rehearsal = subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "tfdist",
                "rehearse",
                f"--log_dir={self.dir}/logs",
                "--timeout_s=120",
                self.path,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for line in rehearsal.stdout:
            if "started sleep-worker-0-1" in line:
                return rehearsal
        self.fail("the pods did not start")

    @pytest.mark.usefixtures("rehearsals_side_by_side")
    def test_sigterm_and_ctrl_c_stop_the_pods_and_remove_the_hosts(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            rehearsal = self._start()
            with _stopped_at_the_end(rehearsal):
                self.assertNotEqual(our_namespaces(rehearsal.pid), [])
                rehearsal.send_signal(signum)
                self.assertEqual(rehearsal.wait(timeout=60), 128 + signum)
            self.assertEqual(our_namespaces(rehearsal.pid), [])

    @pytest.mark.usefixtures("rehearsals_side_by_side")
    def test_the_timeout_covers_setting_up_the_hosts(self):
        path = write_manifest(
            self,
            os.path.join(self.dir, "wide.yaml"),
            "--image=local",
            "--name=wide",
            "--num_workers=20",
            "--",
            "true",
        )
        rehearsal = subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "tfdist",
                "rehearse",
                f"--log_dir={self.dir}/logs",
                "--timeout_s=0.05",
                path,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with _stopped_at_the_end(rehearsal):
            stdout, stderr = rehearsal.communicate(timeout=120)
        self.assertEqual(rehearsal.returncode, 124, stdout[-2000:] + stderr[-2000:])
        self.assertEqual(
            stderr,
            "tfdist rehearse: timed out after 0.05 s; 20 emulated hosts "
            "were still being set up; removed them\n",
        )
        self.assertNotIn("started", stdout, "no pod starts once the time is up")
        self.assertEqual(our_namespaces(rehearsal.pid), [])

    @pytest.mark.usefixtures("rehearsals_alone")
    def test_a_killed_rehearsals_hosts_are_removed_by_the_next(self):
        rehearsal = self._start()
        rehearsal.kill()
        rehearsal.wait(timeout=60)
        self.assertNotEqual(our_namespaces(rehearsal.pid), [])
        path = write_manifest(
            self,
            os.path.join(self.dir, "quick.yaml"),
            "--image=local",
            "--name=quick",
            "--",
            "true",
        )
        result = run_tfdist("rehearse", f"--log_dir={self.dir}/logs", "--timeout_s=60", path)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(our_namespaces(rehearsal.pid), [])


def _rehearsed(scratch: str, path: str) -> tuple[int, str]:
    """`tfdist rehearse PATH` in this process, its logs under `scratch`: (status, stderr)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["tfdist", "rehearse", f"--log_dir={scratch}/logs", path])
    return status, stderr.getvalue()


class RefusedTest(unittest.TestCase):
    def test_names_kubernetes_refuses_are_one_line_before_anything_starts(self):
        # The names become log paths, namespaces and hostnames here.
        for name in ("../../etc", "a;b", "a" * 300):
            with self.subTest(name=name[:12]), tempfile.TemporaryDirectory() as scratch:
                path = write_manifest(
                    self,
                    os.path.join(scratch, "job.yaml"),
                    "--image=local",
                    "--name=ok",
                    "--",
                    "true",
                )
                with open(path, encoding="utf-8") as manifest:
                    document = yaml.safe_load(manifest)
                document["metadata"]["name"] = name
                with open(path, "w", encoding="utf-8") as manifest:
                    yaml.safe_dump(document, manifest)
                status, stderr = _rehearsed(scratch, path)
                self.assertEqual(status, 2)
                self.assertEqual(os.listdir(scratch), ["job.yaml"])  # Nothing made.
                lines = stderr.splitlines()
                self.assertEqual(len(lines), 1, lines)
                self.assertRegex(
                    lines[0],
                    r"^tfdist rehearse: error: manifest metadata.name: .* "
                    r"(is not a DNS-1035 label|more than 63)",
                )

    def test_a_manifest_that_holds_no_mapping_is_one_line_naming_it(self):
        for content, held in (("", "nothing"), ("[1, 2]\n", "no YAML mapping")):
            with self.subTest(held=held), tempfile.TemporaryDirectory() as scratch:
                path = os.path.join(scratch, "job.yaml")
                with open(path, "w", encoding="utf-8") as manifest:
                    manifest.write(content)
                status, stderr = _rehearsed(scratch, path)
                self.assertEqual(status, 2)
                self.assertEqual(
                    stderr,
                    f"tfdist rehearse: error: {path} holds {held}; pass a manifest written by "
                    "`tfdist manifest`.\n",
                )
                self.assertEqual(os.listdir(scratch), ["job.yaml"])  # Nothing made.

    def test_a_rehearsal_too_large_for_this_machine_is_refused_before_it_starts(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = write_manifest(
                self,
                os.path.join(scratch, "job.yaml"),
                "--image=local",
                "--name=wide",
                "--num_workers=3",
                "--memory=1Gi",
                "--",
                "true",
            )
            small = capacity.MachineLimits(
                memory_bytes=2 * 2**30, memory_source="memory", max_threads=None
            )
            with mock.patch.object(capacity.MachineLimits, "of_this_machine", return_value=small):
                status, stderr = _rehearsed(scratch, path)
            self.assertEqual(os.listdir(scratch), ["job.yaml"])  # Nothing made.
        self.assertEqual(status, 2)
        self.assertEqual(
            stderr,
            "tfdist rehearse: error: the manifest's 3 pods need "
            "3.0 GiB (their memory requests, at least 64 MiB each), more than the "
            "2.0 GiB of memory this machine has; rehearse fewer replicas (e.g. "
            "tfdist manifest --num_workers=2), or smaller requests.\n",
        )

    def test_a_gs_path_without_the_emulator_or_openssl_is_one_line(self):
        find_spec, which = importlib.util.find_spec, shutil.which
        missing = {
            "gcp-storage-emulator (not installed); install it: pip install -e '.[rehearse]'.": (
                importlib.util,
                "find_spec",
                lambda name, *args: None if name == "gcp_storage_emulator" else find_spec(name),
            ),
            "openssl (not on PATH); install it: apt install openssl.": (
                shutil,
                "which",
                lambda name, *args, **kwargs: None if name == "openssl" else which(name),
            ),
        }
        for line, (module, name, lookup) in missing.items():
            with self.subTest(line=line[:20]), tempfile.TemporaryDirectory() as scratch:
                path = write_manifest(
                    self,
                    os.path.join(scratch, "job.yaml"),
                    "--image=local",
                    "--name=gcs",
                    "--",
                    "train",
                    "--model_dir=gs://bkt/run",
                )
                with mock.patch.object(module, name, side_effect=lookup):
                    status, stderr = _rehearsed(scratch, path)
                self.assertEqual(os.listdir(scratch), ["job.yaml"])  # Nothing made.
                self.assertEqual(status, 2)
                self.assertEqual(
                    stderr,
                    "tfdist rehearse: error: gs:// paths are served by an emulated Cloud "
                    f"Storage, which needs {line}\n",
                )

    def test_a_machine_that_refuses_namespaces_is_one_line(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "job.yaml")
            with open(path, "w", encoding="utf-8") as manifest:
                manifest.write(
                    manifests.jobset(
                        name="job", pods=manifests.Pods(image="i"), num_workers=1, program=["true"]
                    )
                )
            stderr = io.StringIO()
            with (
                mock.patch.object(hosts_lib.os, "geteuid", return_value=1000),
                mock.patch.object(hosts_lib, "clean_stale", return_value=[]),
                contextlib.redirect_stderr(stderr),
                contextlib.redirect_stdout(io.StringIO()),
            ):
                status = cli.main(["tfdist", "rehearse", f"--log_dir={scratch}/logs", path])
            self.assertEqual(os.listdir(scratch), ["job.yaml"])  # Nothing made.
        self.assertEqual(status, 2)
        lines = stderr.getvalue().strip().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn(
            "tfdist rehearse: error: a rehearsal emulates hosts with network "
            "namespaces, which need root",
            lines[0],
        )


def our_namespaces_of_any_rehearsal() -> list[str]:
    """Namespaces of rehearsals whose process is gone (a live one is another test's)."""
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.startswith(hosts_lib.PREFIX)]
    return [
        name
        for name in names
        if not os.path.exists(f"/proc/{name[len(hosts_lib.PREFIX) :].split('-')[0]}")
    ]


@contextlib.contextmanager
def _stopped_at_the_end(process: subprocess.Popen):
    """Kills `process` if the block leaves it running (a failed assertion)."""
    try:
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=60)


if __name__ == "__main__":
    unittest.main()
