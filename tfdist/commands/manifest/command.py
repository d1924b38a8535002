"""`tfdist manifest`: a cluster manifest for a `tfdist train` command line (or a user's program),
printed on stdout: a Kubernetes JobSet (`--format=jobset`, the default), a Slurm sbatch script
(`--format=slurm`) or a legacy Kubeflow TFJob (`--format=tfjob`), written by
`tfdist.cluster.manifests` once the train flags after `--` have been checked. A flag of another
format is refused rather than ignored."""

import sys
from collections.abc import Sequence

from absl import flags

from tfdist import input_pipelines
from tfdist.cluster import manifests
from tfdist.cluster.manifests import ManifestError
from tfdist.cluster.manifests import jobset_yaml
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands.manifest import slurm_flags
from tfdist.commands import train_flags

FORMATS = ("jobset", "slurm", "tfjob")
_FORMAT = flags.DEFINE_enum(
    "format",
    "jobset",
    list(FORMATS),
    "manifest: a Kubernetes JobSet (YAML), a Slurm sbatch script, or a "
    "Kubeflow TFJob (YAML; legacy, for training-operator 1.9 clusters).",
)
_IMAGE = flags.DEFINE_string(
    "image", None, "manifest: container image of a JobSet or TFJob (with tfdist in it)."
)
_TASK_PORT = flags_lib.define_integer(
    "task_port",
    2222,
    "manifest: the port every pod listens on (jobset, tfjob).",
    lower_bound=1,
    upper_bound=65535,
)
_RESTART_POLICY = flags.DEFINE_enum(
    "restart_policy",
    "OnFailure",
    list(manifests.RESTART_POLICIES),
    "manifest: TFJob replicas' restart policy.",
)
_DATA_SERVICE_WORKERS = flags_lib.define_integer(
    "data_service_workers",
    0,
    "manifest: JobSet pods of a tf.data service (plus its "
    "dispatcher) that `tfdist train` reads its input through; 0 adds "
    "none.",
    lower_bound=0,
    upper_bound=flags_lib.MAX_TASKS,
)
_CPU = flags.DEFINE_string("cpu", None, 'manifest: JobSet CPU request of each pod, e.g. "8".')
_MEMORY = flags.DEFINE_string(
    "memory", None, 'manifest: JobSet memory request and limit of each pod, e.g. "32Gi".'
)
_QUEUE = flags.DEFINE_string(
    "queue",
    None,
    "manifest: the Kueue LocalQueue that admits the JobSet "
    "(kueue.x-k8s.io/queue-name); unset for a cluster without Kueue.",
)
_PRIORITY_CLASS = flags.DEFINE_string(
    "priority_class", None, "manifest: JobSet pods' priorityClassName."
)
_SERVICE_ACCOUNT = flags.DEFINE_string(
    "service_account", None, "manifest: JobSet pods' serviceAccountName."
)
_NODE_SELECTOR = flags.DEFINE_list(
    "node_selector",
    [],
    "manifest: JobSet pods' node labels, as key=value,... e.g. "
    "cloud.google.com/gke-accelerator=nvidia-l4.",
)
_TOLERATIONS = flags.DEFINE_list(
    "tolerations",
    [],
    "manifest: taints JobSet pods tolerate, as key[=value][:Effect]"
    ",... e.g. nvidia.com/gpu:NoSchedule.",
)
_VOLUME_CLAIM = flags.DEFINE_string(
    "volume_claim",
    None,
    "manifest: a ReadWriteMany PersistentVolumeClaim every JobSet pod "
    "mounts at --mount_path: the shared --model_dir that a restart "
    "resumes from and the evaluator reads.",
)
_MOUNT_PATH = flags.DEFINE_string(
    "mount_path", "/mnt/tfdist", "manifest: where JobSet pods mount --volume_claim."
)
_WORKING_DIR = flags.DEFINE_string(
    "working_dir",
    None,
    "manifest: the JobSet containers' working directory (workingDir): where the image holds "
    "your program, so `-- python my_train.py` means DIR/my_train.py; unset: the image's "
    "WORKDIR, and a program given by a relative path is refused.",
)
_DEADLINE_S = flags_lib.define_integer(
    "deadline_s",
    jobset_yaml.DEADLINE_S,
    "manifest: the JobSet's Jobs fail after this many seconds (activeDeadlineSeconds) in each "
    "restart attempt, so nothing the JobSet starts runs for ever: it ends within "
    "(--max_restarts + 1) times this; raise it for longer runs.",
    lower_bound=1,
    upper_bound=jobset_yaml.MAX_DEADLINE_S,
)
_JOBSET_ONLY = (
    cli_flags.MAX_RESTARTS,
    _DATA_SERVICE_WORKERS,
    _CPU,
    _MEMORY,
    _QUEUE,
    _PRIORITY_CLASS,
    _SERVICE_ACCOUNT,
    _NODE_SELECTOR,
    _TOLERATIONS,
    _VOLUME_CLAIM,
    _MOUNT_PATH,
    _WORKING_DIR,
    _DEADLINE_S,
)
flags_lib.register(
    "manifest",
    flags_lib.group(
        cli_flags.NUM_WORKERS,
        train_flags.NUM_PS,
        train_flags.CHIEF,
        cli_flags.EVALUATOR,
        _FORMAT,
        cli_flags.NAME,
        _IMAGE,
        _TASK_PORT,
        cli_flags.GPUS_PER_TASK,
        *_JOBSET_ONLY,
        cli_flags.GRACE_S,
        _RESTART_POLICY,
        train_flags.SLURM_PORT_BASE,
    ),
    slurm_flags.FLAGS,
)
# The formats each format-specific flag applies to; given with another, it is refused.
_ONLY_FOR = {
    **{holder.name: ("jobset",) for holder in _JOBSET_ONLY},
    _IMAGE.name: ("jobset", "tfjob"),
    _TASK_PORT.name: ("jobset", "tfjob"),
    cli_flags.GPUS_PER_TASK.name: ("jobset", "slurm"),
    cli_flags.GRACE_S.name: ("jobset", "slurm"),
    _RESTART_POLICY.name: ("tfjob",),
    train_flags.SLURM_PORT_BASE.name: ("slurm",),
    **{name: ("slurm",) for name in slurm_flags.FLAGS},
}


def split_command(command: Sequence[str]) -> tuple[list[str] | None, list[str] | None]:
    """The command after `--` as (train flags, None) for `train ...` (or flags alone), or as
    (None, program) for a program of the user's.

    Raises:
      ManifestError: no command.
    """
    command = list(command)
    if not command:
        raise ManifestError(
            "manifest needs the command after `--`, e.g. `tfdist manifest "
            "--image=IMAGE --num_workers=2 -- train --strategy=auto`."
        )
    if command[0] == "train":
        return command[1:], None
    if command[0].startswith("-"):
        return command, None
    return None, command


def main(command: list[str]) -> int:
    """Prints the manifest of the command after `--`; returns 0.

    Raises:
      ManifestError, UsageError and the train flags' errors: a flag of another format, a
        Kubernetes manifest without --image, an invalid layout, a bad train flag, a global
        batch that does not split over the job's replicas.
    """
    manifest_format = _FORMAT.value
    for name, formats in _ONLY_FOR.items():
        if flags_lib.FLAGS[name].present and manifest_format not in formats:
            raise flags_lib.UsageError(
                f"--{name} is for --format={' or --format='.join(formats)}, not "
                f"--format={manifest_format}; drop it or change --format."
            )
    # Read before checking the train flags, which parses FLAGS anew, for `tfdist train`.
    values = {name: flags_lib.FLAGS[name].value for name in flags_lib.COMMAND_FLAGS["manifest"]}
    slurm_options = slurm_flags.options() if manifest_format == "slurm" else {}
    train_args, program = split_command(command)
    model_dir = None
    if train_args is not None:
        sweep = slurm_options.get("sweep")
        for flag, _ in sweep.grid if sweep else ():
            if flag not in flags_lib.COMMAND_FLAGS["train"]:
                raise ManifestError(
                    f"slurm_sweep: {flag!r} is not a flag of `tfdist train`; sweep one of its "
                    "flags (`tfdist train --help`), e.g. --slurm_sweep=learning_rate=0.1,0.3."
                )
        for run in sweep.runs() if sweep else ():  # Each array task's flags, as it runs them.
            _check_train(values, [*train_args, *(f"--{k}={v}" for k, v in run.items())])
        _check_train(values, train_args)
        model_dir = train_flags.TRAIN["model_dir"].value
    elif manifest_format == "tfjob":
        raise ManifestError(
            f"format={manifest_format} runs `tfdist train` in each task, not "
            f"{program[0]!r}; pass `-- train FLAGS`, or --format=jobset for a "
            "program of your own."
        )
    if manifest_format != "slurm" and not values["image"]:
        raise ManifestError(
            f"image={values['image']!r}: a {manifest_format} runs a container "
            "image; pass --image=IMAGE (an image with tfdist installed)."
        )
    text = _text(manifest_format, values, slurm_options, train_args, program, model_dir)
    _check_writable(
        text,
        sys.stdout.encoding or "utf-8",
        [
            *(f"--{name}={value}" for name, value in values.items()),
            *(train_args or ()),
            *(program or ()),
        ],
    )
    print(text, end="")
    return 0


def _check_train(values: dict, train_args: list[str]) -> None:
    """Checks `tfdist train train_args` as the job's tasks would parse them; synchronous, its
    global batch must split over every replica (a per-replica one always does)."""
    train_flags.check_train_args(train_args)
    if not values["num_ps"] and train_flags.per_replica_batch_size() is None:
        per_task = values["gpus_per_task"] or train_flags.strategy_config().num_cpu_devices
        input_pipelines.per_replica_batch_size(
            train_flags.input_config().global_batch_size,
            (values["num_workers"] + values["chief"]) * per_task,
        )


def _check_writable(text: str, encoding: str, arguments: list[str]) -> None:
    """Raises ManifestError when stdout's `encoding` cannot write the manifest `text` (a value
    with non-ASCII characters under PYTHONIOENCODING=ascii), naming the argument of
    `arguments` the character came from, before anything is printed."""
    try:
        text.encode(encoding)
    except UnicodeEncodeError as error:
        char = text[error.start]
        source = next((argument for argument in arguments if char in argument), "a flag's value")
        raise ManifestError(
            f"{source!r} holds {char!r}, which stdout's encoding {encoding} "
            "cannot write; set PYTHONIOENCODING=utf-8 (or a UTF-8 locale), or "
            "write the value in ASCII."
        ) from None


def _text(
    manifest_format: str,
    values: dict,
    slurm_options: dict,
    train_args: list[str] | None,
    program: list[str] | None,
    model_dir: str | None,
) -> str:
    layout = {
        "num_workers": values["num_workers"],
        "num_ps": values["num_ps"],
        "chief": values["chief"],
    }
    if manifest_format == "slurm":
        return manifests.slurm(
            job_name=values["name"],
            train_args=train_args,
            **layout,
            port=values["slurm_port_base"],
            gpus_per_task=values["gpus_per_task"],
            python=sys.executable,
            program=program,
            grace_s=values["grace_s"],
            **slurm_options,
        )
    if manifest_format == "tfjob":
        return manifests.tfjob(
            name=values["name"],
            image=values["image"],
            train_args=train_args,
            **layout,
            evaluator=values["evaluator"],
            restart_policy=values["restart_policy"],
            port=values["task_port"],
        )
    node_selector = {}
    for entry in values["node_selector"]:
        key, equals, value = entry.partition("=")
        if not equals:
            raise ManifestError(
                f"node_selector={entry!r} is not key=value; write e.g. "
                "--node_selector=cloud.google.com/gke-accelerator=nvidia-l4."
            )
        if key in node_selector:
            raise ManifestError(
                f"node_selector={entry!r} repeats the key {key!r} (already "
                f"{node_selector[key]!r}); a node has one value per label: "
                "give each key once."
            )
        node_selector[key] = value
    pods = manifests.Pods(
        image=values["image"],
        cpu=values["cpu"],
        memory=values["memory"],
        gpus=values["gpus_per_task"],
        queue=values["queue"],
        priority_class=values["priority_class"],
        service_account=values["service_account"],
        node_selector=node_selector,
        tolerations=tuple(values["tolerations"]),
        volume_claim=values["volume_claim"],
        mount_path=values["mount_path"],
        working_dir=values["working_dir"],
        grace_s=values["grace_s"],
    )
    return manifests.jobset(
        name=values["name"],
        pods=pods,
        **layout,
        evaluator=values["evaluator"],
        data_service_workers=values["data_service_workers"],
        port=values["task_port"],
        max_restarts=values["max_restarts"],
        deadline_s=values["deadline_s"],
        train_args=train_args,
        program=program,
        model_dir=model_dir,
    )
