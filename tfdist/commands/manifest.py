"""`tfdist manifest`: a cluster manifest for a `tfdist train` command line, printed on stdout: a
Kubeflow TFJob (`--format=tfjob --image=IMAGE`) or a Slurm sbatch script (`--format=slurm`),
written by `tfdist.cluster.manifest` once the train flags after `--` have been checked."""

from collections.abc import Sequence

from absl import flags

from tfdist.cluster import manifest
from tfdist.cluster.manifest import ManifestError
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands import train_flags
from tfdist.strategies.config import MAX_REPLICA_DEVICES

_FORMAT = flags.DEFINE_enum("format", "tfjob", ["tfjob", "slurm"],
                            "manifest: a Kubeflow TFJob (YAML) or a Slurm sbatch script.")
_NAME = flags.DEFINE_string("name", "tfdist", "manifest: the TFJob name or Slurm job name.")
_IMAGE = flags.DEFINE_string("image", None,
                             "manifest: container image of a TFJob (with tfdist in it).")
_RESTART_POLICY = flags.DEFINE_enum("restart_policy", "OnFailure", list(manifest.RESTART_POLICIES),
                                    "manifest: TFJob replicas' restart policy.")
_TIME_LIMIT = flags.DEFINE_string("time_limit", "01:00:00", "manifest: Slurm --time of the job.")
_GPUS_PER_TASK = flags.DEFINE_integer("gpus_per_task", 0, "manifest: Slurm --gpus-per-task.",
                                      lower_bound=0, upper_bound=MAX_REPLICA_DEVICES)
flags_lib.register("manifest", flags_lib.group(
    cli_flags.NUM_WORKERS, train_flags.NUM_PS, train_flags.CHIEF, cli_flags.EVALUATOR, _FORMAT,
    _NAME, _IMAGE, _RESTART_POLICY, _TIME_LIMIT, _GPUS_PER_TASK))


def train_args_of(command: Sequence[str]) -> list[str]:
    """The `tfdist train` flags of `tfdist manifest`'s command (`train ...`, or flags alone).

    Raises:
      ManifestError: no command.
    """
    if not command:
        raise ManifestError("manifest needs the train command after `--`, e.g. `tfdist manifest "
                            "--image=IMAGE --num_workers=2 -- train --strategy=auto`.")
    return list(command)[1:] if list(command)[:1] == ["train"] else list(command)


def main(command: list[str]) -> int:
    """Prints the manifest of the train command after `--`; returns 0.

    Raises:
      ManifestError, and the train flags' errors: a TFJob without --image, an invalid layout, a
        bad train flag.
    """
    # The layout first: checking the train flags parses FLAGS anew, for `tfdist train`.
    layout = {"num_workers": cli_flags.NUM_WORKERS.value, "num_ps": train_flags.NUM_PS.value,
              "chief": train_flags.CHIEF.value}
    evaluator, image, name = cli_flags.EVALUATOR.value, _IMAGE.value, _NAME.value
    manifest_format, restart_policy = _FORMAT.value, _RESTART_POLICY.value
    time_limit, gpus_per_task = _TIME_LIMIT.value, _GPUS_PER_TASK.value
    train_args = train_args_of(command)
    train_flags.check_train_args(train_args)
    if manifest_format == "tfjob":
        if not image:
            raise ManifestError(f"image={image!r}: a TFJob runs a container image; pass "
                                "--image=IMAGE (an image with tfdist installed).")
        text = manifest.tfjob(name=name, image=image, train_args=train_args, **layout,
                              evaluator=evaluator, restart_policy=restart_policy)
    else:
        text = manifest.slurm(job_name=name, train_args=train_args, **layout,
                              time_limit=time_limit, gpus_per_task=gpus_per_task)
    print(text, end="")
    return 0
