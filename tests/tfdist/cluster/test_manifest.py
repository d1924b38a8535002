"""Tests for tfdist.cluster.manifest: the Kubeflow TFJob YAML and the Slurm sbatch script.

PyYAML is not a dependency, so the YAML is read back with `_read_yaml`, a reader for the block
subset the emitter writes (written independently of it), and cross-checked with PyYAML when some
`python3` on PATH has it.
"""

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest
from absl.testing import absltest
from absl.testing import parameterized

from tfdist.cluster import manifest
from tfdist.cluster.manifest import ManifestError

_TRAIN_ARGS = ["--strategy=parameter_server", "--epochs=2", "--model_dir=/tmp/my run",
               "--dataset=tfrecord:/data/{split}-*", "yes", "it's \"quoted\" $HOME #x"]
_TFJOB = dict(name="tfdist-train", image="registry.example.com/tfdist:0.1.0",
              train_args=_TRAIN_ARGS)
_SLURM = dict(job_name="tfdist-train", train_args=_TRAIN_ARGS)


def _read_yaml(text):
    """Reads block-style YAML: mappings, "- " sequences, plain and double-quoted scalars."""
    lines = [(len(line) - len(line.lstrip(" ")), line.strip()) for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    value, end = _read_block(lines, 0, lines[0][0])
    assert end == len(lines), f"unread line {end}: {lines[end]}"
    return value


def _read_block(lines, i, indent):
    if lines[i][1] == "-" or lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("-"):
            rest = lines[i][1][2:]
            if re.match(r"[A-Za-z_][\w.-]*:( |$)", rest) or rest.startswith("- "):
                lines[i] = (indent + 2, rest)  # "- key: v" opens a nested block.
                item, i = _read_block(lines, i, indent + 2)
            else:
                item, i = _read_scalar(rest), i + 1
            items.append(item)
        return items, i
    mapping = {}
    while i < len(lines) and lines[i][0] == indent:
        key, colon, rest = lines[i][1].partition(":")
        assert colon and key not in mapping, lines[i]
        if rest.strip():
            mapping[key], i = _read_scalar(rest.strip()), i + 1
        else:
            assert lines[i + 1][0] > indent, lines[i + 1]
            mapping[key], i = _read_block(lines, i + 1, lines[i + 1][0])
    return mapping, i


def _read_scalar(text):
    if text.startswith('"'):
        assert text.endswith('"') and len(text) > 1, text
        body = re.sub(r"\\U([0-9a-fA-F]{8})", lambda m: chr(int(m.group(1), 16)), text[1:-1])
        return json.loads(f'"{body}"')
    words = {"true": True, "false": False, "null": None, "[]": [], "{}": {}}
    if text in words:
        return words[text]
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_./-]*", text), f"ambiguous plain scalar {text!r}"
    return text


def _container(document, kind):
    spec = document["spec"]["tfReplicaSpecs"][kind]
    (container,) = spec["template"]["spec"]["containers"]
    return container


def _pyyaml_python():
    """A `python3` on PATH that has PyYAML, or None."""
    python = shutil.which("python3")
    if python and subprocess.run([python, "-c", "import yaml"], capture_output=True,
                                 timeout=30).returncode == 0:
        return python
    return None


class TfjobTest(parameterized.TestCase):

    def test_worker_only(self):
        document = _read_yaml(manifest.tfjob(**_TFJOB, num_workers=3))
        self.assertEqual(document["apiVersion"], "kubeflow.org/v1")
        self.assertEqual(document["kind"], "TFJob")
        self.assertEqual(document["metadata"], {"name": "tfdist-train"})
        replicas = document["spec"]["tfReplicaSpecs"]
        self.assertEqual(list(replicas), ["Worker"])
        self.assertEqual(replicas["Worker"]["replicas"], 3)
        self.assertEqual(replicas["Worker"]["restartPolicy"], "OnFailure")
        self.assertEqual(_container(document, "Worker"), {
            "name": "tensorflow",
            "image": "registry.example.com/tfdist:0.1.0",
            "command": ["tfdist", "train", *_TRAIN_ARGS],
            "ports": [{"name": "tfjob-port", "containerPort": 2222}],
        })

    @parameterized.named_parameters(
        ("ps_and_chief", dict(num_workers=2, num_ps=1, chief=True),
         {"Chief": 1, "Worker": 2, "PS": 1}),
        ("evaluator", dict(num_workers=1, evaluator=True), {"Worker": 1, "Evaluator": 1}),
        ("everything", dict(num_workers=4, num_ps=2, chief=True, evaluator=True),
         {"Chief": 1, "Worker": 4, "PS": 2, "Evaluator": 1}),
    )
    def test_replica_specs(self, layout, expected):
        document = _read_yaml(manifest.tfjob(**_TFJOB, **layout, restart_policy="ExitCode",
                                             port=5000))
        replicas = document["spec"]["tfReplicaSpecs"]
        self.assertEqual({kind: spec["replicas"] for kind, spec in replicas.items()}, expected)
        self.assertEqual(list(replicas), list(expected))  # Chief, Worker, PS, Evaluator.
        for kind, spec in replicas.items():
            self.assertEqual(spec["restartPolicy"], "ExitCode")
            container = _container(document, kind)
            self.assertEqual(container["name"], "tensorflow")
            self.assertEqual(container["command"], ["tfdist", "train", *_TRAIN_ARGS])
            self.assertEqual(container["ports"], [{"name": "tfjob-port", "containerPort": 5000}])

    @pytest.mark.multiprocess
    def test_pyyaml_reads_the_same_document(self):
        python = _pyyaml_python()
        if python is None:
            self.skipTest("no python3 with PyYAML on PATH")
        text = manifest.tfjob(**_TFJOB, num_workers=2, num_ps=1, chief=True, evaluator=True)
        result = subprocess.run(
            [python, "-c", "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))"],
            input=text, capture_output=True, text=True, check=True, timeout=30)
        self.assertEqual(json.loads(result.stdout), _read_yaml(text))

    @parameterized.named_parameters(
        ("name_upper", dict(name="My_Job"), "tfjob name", "'My_Job'", "lowercase"),
        ("name_too_long", dict(name="a" * 64), "tfjob name", "'aaaa", "at most 63"),
        ("name_dash_end", dict(name="job-"), "tfjob name", "'job-'", "ending with a letter"),
        ("image_empty", dict(image=""), "tfjob image", "''", "container image"),
        ("no_workers", dict(num_workers=0), "tfjob num_workers", "0", "at least 1 worker"),
        ("negative_ps", dict(num_ps=-1, chief=True), "tfjob num_ps", "-1", "0 or more"),
        ("ps_without_chief", dict(num_ps=2), "tfjob num_ps", "2", "add --chief"),
        ("restart_policy", dict(restart_policy="Sometimes"), "tfjob restart_policy",
         "'Sometimes'", "OnFailure, Never, Always, ExitCode"),
        ("port", dict(port=70000), "tfjob port", "70000", "from 1 to 65535"),
        ("args_string", dict(train_args="--epochs=2"), "tfjob train_args", "'--epochs=2'",
         "list of strings"),
    )
    def test_errors_are_one_line(self, override, field, value, fix):
        kwargs = {**_TFJOB, "num_workers": 1, **override}
        with self.assertRaisesRegex(ManifestError, rf"^{re.escape(field)}: "
                                                   rf"{re.escape(value)}.*; .*{re.escape(fix)}"):
            manifest.tfjob(**kwargs)
        try:
            manifest.tfjob(**kwargs)
        except ManifestError as exc:
            self.assertNotIn("\n", str(exc))
            self.assertIsInstance(exc, ValueError)


class ToYamlTest(parameterized.TestCase):

    def test_tricky_scalars_read_back(self):
        value = {"strings": ["yes", "No", "on", "null", "~", "1.5", "0x1f", "-1", ".inf", "a: b",
                             "#c", "- d", "", " lead", "tab\there", "line\nbreak", "é😀",
                             'quote " and \\'],
                 "numbers": [0, -3, 2222], "flags": [True, False, None],
                 "empty": {"list": [], "map": {}}, "nested": [[1, 2], [{"k": "v"}]]}
        self.assertEqual(_read_yaml(manifest.to_yaml(value)), value)


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
        script = manifest.slurm(**_SLURM, num_workers=3, num_ps=1, chief=True,
                                time_limit="2-00:00:00")
        lines = script.splitlines()
        self.assertEqual(lines[0], "#!/bin/bash")
        self.assertIn("#SBATCH --job-name=tfdist-train", lines)
        self.assertIn("#SBATCH --ntasks=5", lines)
        self.assertIn("#SBATCH --time=2-00:00:00", lines)
        self.assertNotIn("--gpus-per-task", script)
        self.assertIn("8888", script)  # The port is documented.
        self.assertIn("no authentication", script)

    def test_gpus_per_task(self):
        script = manifest.slurm(**_SLURM, num_workers=2, gpus_per_task=2)
        self.assertIn("#SBATCH --gpus-per-task=2", script.splitlines())
        self.assertIn("#SBATCH --ntasks=2", script.splitlines())

    @parameterized.named_parameters(
        ("workers", dict(num_workers=2), ["--cluster_resolver=slurm", "--slurm_port_base=8888"]),
        ("ps", dict(num_workers=2, num_ps=2, chief=True, port=7000),
         ["--cluster_resolver=slurm", "--slurm_port_base=7000", "--num_ps=2", "--chief"]),
    )
    def test_srun_line_quotes_the_train_args(self, layout, flags):
        script = manifest.slurm(**_SLURM, **layout)
        srun = [line for line in script.splitlines() if line.startswith("srun ")]
        self.assertLen(srun, 1)
        self.assertEqual(shlex.split(srun[0]), ["srun", "tfdist", "train", *flags, *_TRAIN_ARGS])

    @pytest.mark.multiprocess
    def test_bash_accepts_the_script(self):
        path = self._write(manifest.slurm(**_SLURM, num_workers=2))
        result = subprocess.run(["bash", "-n", path], capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)

    @pytest.mark.multiprocess
    def test_srun_gets_the_args_verbatim(self):
        """Runs the script with a fake srun that prints its arguments: nothing is expanded."""
        bin_dir = self._tempdir()
        fake_srun = os.path.join(bin_dir, "srun")
        with open(fake_srun, "w", encoding="utf-8") as f:
            f.write(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
        os.chmod(fake_srun, os.stat(fake_srun).st_mode | stat.S_IXUSR)
        path = self._write(manifest.slurm(**_SLURM, num_workers=2))
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        result = subprocess.run(["bash", path], capture_output=True, text=True, timeout=30,
                                env=env, cwd=bin_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), ["tfdist", "train", "--cluster_resolver=slurm",
                                                     "--slurm_port_base=8888", *_TRAIN_ARGS])

    @parameterized.named_parameters(
        ("job_name", dict(job_name="my job"), "slurm job_name", "'my job'", "letters, digits"),
        ("time", dict(time_limit="1h"), "slurm time_limit", "'1h'", "01:00:00"),
        ("no_workers", dict(num_workers=0), "slurm num_workers", "0", "at least 1 worker"),
        ("ps_without_chief", dict(num_ps=1), "slurm num_ps", "1", "add --chief"),
        ("port", dict(port=0), "slurm port", "0", "from 1 to 65535"),
        ("gpus", dict(gpus_per_task=-1), "slurm gpus_per_task", "-1", "GPUs per task"),
        ("args", dict(train_args=["--epochs", 2]), "slurm train_args", "['--epochs', 2]",
         "list of strings"),
    )
    def test_errors_are_one_line(self, override, field, value, fix):
        kwargs = {**_SLURM, "num_workers": 1, **override}
        with self.assertRaisesRegex(ManifestError, rf"^{re.escape(field)}: "
                                                   rf"{re.escape(value)}.*; .*{re.escape(fix)}"):
            manifest.slurm(**kwargs)


class SecurityNoteTest(absltest.TestCase):

    def test_module_says_the_cluster_needs_a_private_network(self):
        doc = " ".join(manifest.__doc__.split())
        self.assertIn("gRPC servers (workers, parameter servers, the chief) have no authentication",
                      doc)
        self.assertIn("private network", doc)


if __name__ == "__main__":
    absltest.main()
