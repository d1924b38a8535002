"""A Kubeflow `TFJob` (kubeflow.org/v1) for a `tfdist train` command line: legacy, for clusters
that still run Kubeflow's training-operator 1.9 (Kubeflow removed TFJob from its trainer in 2025;
`jobset` is the way on a current cluster).

The operator starts one pod per replica and sets each pod's TF_CONFIG, which `tfdist train`
reads, so the manifest needs no cluster details of its own.
"""

from collections.abc import Sequence
from typing import Any

from tfdist.cluster.manifests import checks

TFJOB_API_VERSION = "kubeflow.org/v1"
TFJOB_CONTAINER_NAME = "tensorflow"  # The operator only manages a container of this name.
TFJOB_PORT_NAME = "tfjob-port"  # The operator reads the task port from this port name.
RESTART_POLICIES = ("OnFailure", "Never", "Always", "ExitCode")


def tfjob(
    *,
    name: str,
    image: str,
    train_args: Sequence[str],
    num_workers: int,
    num_ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    restart_policy: str = "OnFailure",
    port: int = 2222,
) -> str:
    """Returns a Kubeflow TFJob YAML document that runs `tfdist train <train_args>` in each pod.

    Replica specs come in the order Chief, Worker, PS, Evaluator, each with its container
    `tensorflow` running `image`. The operator writes TF_CONFIG into every pod.

    Args:
        name: the TFJob's name, a lowercase RFC 1123 label (pods are named `<name>-worker-0`...).
        image: the container image; it must have `tfdist` on its PATH.
        train_args: the flags after `tfdist train`, e.g. ["--strategy=multi_worker_mirrored"].
        num_workers: the Worker replicas (the chief, if any, comes on top).
        num_ps: the PS (parameter server) replicas; they need a chief.
        chief: whether to add a Chief replica (the ParameterServerStrategy coordinator).
        evaluator: whether to add an Evaluator replica.
        restart_policy: the replicas' restart policy: OnFailure, Never, Always or ExitCode.
        port: the port every task's gRPC server listens on.

    Raises:
        ManifestError: an argument is invalid.
    """
    checks.check_k8s_name("tfjob name", name)
    checks.check_image("tfjob image", image)
    checks.check_choice("tfjob restart_policy", restart_policy, RESTART_POLICIES)
    checks.check_layout("tfjob", num_workers=num_workers, num_ps=num_ps, chief=chief)
    checks.check_port("tfjob port", port)
    command = [
        "tfdist",
        "train",
        *map(checks.kubernetes_literal, checks.check_args("tfjob", train_args)),
    ]
    counts = {"Chief": int(chief), "Worker": num_workers, "PS": num_ps, "Evaluator": int(evaluator)}
    replica_specs = {
        kind: _replica_spec(replicas, restart_policy, image, command, port)
        for kind, replicas in counts.items()
        if replicas
    }
    document = {
        "apiVersion": TFJOB_API_VERSION,
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": replica_specs},
    }
    return checks.to_yaml(document)


def _replica_spec(
    replicas: int, restart_policy: str, image: str, command: list[str], port: int
) -> dict[str, Any]:
    container = {
        "name": TFJOB_CONTAINER_NAME,
        "image": image,
        "command": command,
        "ports": [{"name": TFJOB_PORT_NAME, "containerPort": port}],
    }
    return {
        "replicas": replicas,
        "restartPolicy": restart_policy,
        "template": {"spec": {"containers": [container]}},
    }
