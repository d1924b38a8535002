"""Tests for tfdist.cluster.manifests.tfjob_yaml: the legacy Kubeflow TFJob."""

import re

import yaml
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
# As written: Kubernetes expands $(VAR) in a container's command, and turns $$ into $.
_WRITTEN_ARGS = [*_TRAIN_ARGS[:-1], 'it\'s "quoted" $$HOME #x']
_TFJOB = dict(
    name="tfdist-train", image="registry.example.com/tfdist:0.1.0", train_args=_TRAIN_ARGS
)


def _container(document, kind):
    spec = document["spec"]["tfReplicaSpecs"][kind]
    (container,) = spec["template"]["spec"]["containers"]
    return container


class TfjobTest(parameterized.TestCase):
    def test_worker_only(self):
        document = yaml.safe_load(manifests.tfjob(**_TFJOB, num_workers=3))
        self.assertEqual(document["apiVersion"], "kubeflow.org/v1")
        self.assertEqual(document["kind"], "TFJob")
        self.assertEqual(document["metadata"], {"name": "tfdist-train"})
        replicas = document["spec"]["tfReplicaSpecs"]
        self.assertEqual(list(replicas), ["Worker"])
        self.assertEqual(replicas["Worker"]["replicas"], 3)
        self.assertEqual(replicas["Worker"]["restartPolicy"], "OnFailure")
        self.assertEqual(
            _container(document, "Worker"),
            {
                "name": "tensorflow",
                "image": "registry.example.com/tfdist:0.1.0",
                "command": ["tfdist", "train", *_WRITTEN_ARGS],
                "ports": [{"name": "tfjob-port", "containerPort": 2222}],
            },
        )

    @parameterized.named_parameters(
        (
            "ps_and_chief",
            dict(num_workers=2, num_ps=1, chief=True),
            {"Chief": 1, "Worker": 2, "PS": 1},
        ),
        ("evaluator", dict(num_workers=1, evaluator=True), {"Worker": 1, "Evaluator": 1}),
        (
            "everything",
            dict(num_workers=4, num_ps=2, chief=True, evaluator=True),
            {"Chief": 1, "Worker": 4, "PS": 2, "Evaluator": 1},
        ),
    )
    def test_replica_specs(self, layout, expected):
        document = yaml.safe_load(
            manifests.tfjob(**_TFJOB, **layout, restart_policy="ExitCode", port=5000)
        )
        replicas = document["spec"]["tfReplicaSpecs"]
        self.assertEqual({kind: spec["replicas"] for kind, spec in replicas.items()}, expected)
        self.assertEqual(list(replicas), list(expected))  # Chief, Worker, PS, Evaluator.
        for kind, spec in replicas.items():
            self.assertEqual(spec["restartPolicy"], "ExitCode")
            container = _container(document, kind)
            self.assertEqual(container["name"], "tensorflow")
            self.assertEqual(container["command"], ["tfdist", "train", *_WRITTEN_ARGS])
            self.assertEqual(container["ports"], [{"name": "tfjob-port", "containerPort": 5000}])

    @parameterized.named_parameters(
        ("name_upper", dict(name="My_Job"), "tfjob name", "'My_Job'", "lowercase"),
        ("name_too_long", dict(name="a" * 64), "tfjob name", "'aaaa", "at most 63"),
        ("name_dash_end", dict(name="job-"), "tfjob name", "'job-'", '"tfdist-train"'),
        ("image_empty", dict(image=""), "tfjob image", "''", "container image"),
        ("image_shell", dict(image="$(id)"), "tfjob image", "'$(id)'", "container image"),
        ("no_workers", dict(num_workers=0), "tfjob num_workers", "0", "at least 1 worker"),
        ("negative_ps", dict(num_ps=-1, chief=True), "tfjob num_ps", "-1", "0 or more"),
        ("ps_without_chief", dict(num_ps=2), "tfjob num_ps", "2", "add --chief"),
        (
            "restart_policy",
            dict(restart_policy="Sometimes"),
            "tfjob restart_policy",
            "'Sometimes'",
            "OnFailure, Never, Always, ExitCode",
        ),
        ("port", dict(port=70000), "tfjob port", "70000", "from 1 to 65535"),
        (
            "args_string",
            dict(train_args="--epochs=2"),
            "tfjob train_args",
            "'--epochs=2'",
            "list of strings",
        ),
    )
    def test_errors_are_one_line(self, override, field, value, fix):
        kwargs = {**_TFJOB, "num_workers": 1, **override}
        with self.assertRaisesRegex(
            ManifestError,
            rf"^{re.escape(field)}: "
            rf"{re.escape(value)}.*; .*{re.escape(fix)}",
        ):
            manifests.tfjob(**kwargs)
        try:
            manifests.tfjob(**kwargs)
        except ManifestError as exc:
            self.assertNotIn("\n", str(exc))
            self.assertIsInstance(exc, ValueError)


if __name__ == "__main__":
    absltest.main()
