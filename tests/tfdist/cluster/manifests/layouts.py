"""The job layouts the manifest tests write, and the JobSet pods each makes."""

from tfdist.cluster import manifests


SHARED = manifests.Pods(
    image="registry.example.com/tfdist:0.2", volume_claim="tfdist-runs", mount_path="/mnt/runs"
)


LAYOUTS = {
    "multi_worker": (
        dict(num_workers=2, train_args=["--strategy=multi_worker_mirrored"]),
        {"worker": 2},
    ),
    "parameter_server_with_evaluator": (
        dict(
            num_workers=2,
            num_ps=1,
            chief=True,
            evaluator=True,
            pods=SHARED,
            max_restarts=3,
            train_args=["--strategy=parameter_server", "--model_dir=/mnt/runs/ctr"],
            model_dir="/mnt/runs/ctr",
        ),
        {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1},
    ),
    "gpus_and_queue": (
        dict(
            num_workers=4,
            train_args=["--precision=mixed_float16"],
            pods=manifests.Pods(
                image="registry.example.com/tfdist:0.2",
                cpu="8",
                memory="64Gi",
                gpus=8,
                queue="team-a",
                priority_class="high",
                service_account="trainer",
                node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                tolerations=("nvidia.com/gpu:NoSchedule", "dedicated=ml:NoExecute", "spot"),
            ),
        ),
        {"worker": 4},
    ),
    "data_service": (
        dict(num_workers=2, data_service_workers=3, train_args=["--epochs=3"]),
        {"worker": 2, "dispatcher": 1, "data-worker": 3},
    ),
    "program": (
        dict(
            num_workers=2,
            program=["python", "my_train.py", "--epochs=3"],
            pods=manifests.Pods(image="registry.example.com/tfdist:0.2", working_dir="/app"),
        ),
        {"worker": 2},
    ),
}
