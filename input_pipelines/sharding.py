"""The sharding plan: which files each input pipeline reads and which of their examples it keeps.

Pure Python, so the plan can be computed, printed and tested without TensorFlow. A pipeline is
what `tf.distribute` builds one of per `InputContext`: one per worker, or one per replica.
"""

import dataclasses

from .choices import AutoShard
from .messages import InputConfigError


def _ordinal(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """What input pipeline `pipeline_id` of `num_pipelines` reads in one epoch.

    Attributes:
      policy: FILE (whole files per pipeline), DATA (all files, every N-th example) or OFF
        (everything); never AUTO.
      file_indices: indices into the split's sorted file list this pipeline opens.
      notice: why `auto` chose what it chose, when the user may want to act on it.
    """

    policy: AutoShard
    pipeline_id: int
    num_pipelines: int
    num_files: int
    file_indices: tuple[int, ...]
    notice: str | None = None

    @property
    def keeps_every_nth(self) -> bool:
        return self.policy is AutoShard.DATA and self.num_pipelines > 1

    def records_an_epoch(self, file_counts: list[int]) -> int:
        """How many records this pipeline reads an epoch, from the record counts of its files."""
        total = sum(file_counts)
        if self.keeps_every_nth:
            return len(range(self.pipeline_id, total, self.num_pipelines))
        return total

    def describe(self) -> str:
        """One line, e.g. 'input pipeline 1/2 reads files 1,3,5 of 6; each example once per
        epoch'."""
        who = f"input pipeline {self.pipeline_id}/{self.num_pipelines}"
        if self.policy is AutoShard.FILE:
            files = ",".join(str(index) for index in self.file_indices)
            return f"{who} reads files {files} of {self.num_files}; each example once per epoch"
        if self.keeps_every_nth:
            return (
                f"{who} reads all {self.num_files} files and keeps every "
                f"{_ordinal(self.num_pipelines)} example (offset {self.pipeline_id}); each "
                "example once per epoch"
            )
        times = (
            "once" if self.num_pipelines == 1 else f"{self.num_pipelines} times (once per pipeline)"
        )
        return f"{who} reads all {self.num_files} files; each example {times} per epoch"


def plan(policy: AutoShard, *, num_files: int, num_pipelines: int, pipeline_id: int) -> ShardPlan:
    """Plans pipeline `pipeline_id`'s share of `num_files` sorted files.

    Raises:
      InputConfigError: `file` sharding with fewer files than pipelines (some would read
        nothing).
    """
    if not 0 <= pipeline_id < num_pipelines:
        raise InputConfigError(f"pipeline_id={pipeline_id} is not in [0, {num_pipelines}).")
    all_files = tuple(range(num_files))
    notice = None
    if policy is AutoShard.AUTO:
        if num_files >= num_pipelines:
            policy = AutoShard.FILE
        else:
            policy = AutoShard.DATA
            notice = (
                f"autoshard=auto: {num_files} file(s) for {num_pipelines} input pipelines, "
                "so every pipeline reads every file and keeps every "
                f"{_ordinal(num_pipelines)} example; write at least {num_pipelines} "
                "files to shard by file"
            )
    if policy is AutoShard.FILE:
        if num_files < num_pipelines:
            raise InputConfigError(
                f"autoshard=file: {num_files} file(s) for {num_pipelines} input pipelines leaves "
                f"some pipelines without data; use autoshard=data or write at least "
                f"{num_pipelines} files."
            )
        return ShardPlan(
            policy,
            pipeline_id,
            num_pipelines,
            num_files,
            all_files[pipeline_id::num_pipelines],
            notice,
        )
    return ShardPlan(policy, pipeline_id, num_pipelines, num_files, all_files, notice)
