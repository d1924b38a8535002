"""Save on notice: a preemption notice ends the run at one step every task agrees on, with the
training state saved there, and exit status 75 (`errors.Preempted`).

The notice is SIGTERM (a pod's deletion, `scancel`, `tfdist launch` stopping) or the signal
`--preemption_signal` names; the process's handler (`tfdist.runtime.notice`, which also says
what a notice does before training and after it) only notes it while training, and the step
loop acts on it at a step boundary, so no step is cut in half:
- one process (one_device, mirrored; the parameter-server coordinator) stops at the next step's
  end, or, in validation, at the epoch's end;
- multi_worker_mirrored: each worker's notice is a flag that every step all-reduces after its
  update (one scalar), so all workers read the same sum at the same step and stop there
  together, whichever of them got the signal (a worker left running would wait on a collective
  forever).
A second signal during the save changes nothing: TensorFlow writes a checkpoint beside the last
complete one and points to it only when it is whole, so a save the grace period cuts short leaves
the previous state.
"""

import math
import os
import sys
import time
from typing import Callable

import tensorflow as tf

from tfdist import errors
from tfdist.runtime import output_files
from tfdist.cluster import GRACE_ENV
from tfdist.runtime.model_dir import read_record
from tfdist.runtime.model_dir import storage
from tfdist.runtime import notice as process_notice
from tfdist.runtime.notice import Notice
from tfdist.runtime.setup import Plan
from tfdist.strategies import StrategyKind


class Agreement:
    """The notice as a flag that each step sums over every replica of every worker
    (multi_worker_mirrored): a step's sum is above 0 on all workers alike once any worker
    raised its flag before that step began. The sum rides in the step's gradient all-reduce
    where tfdist's gradient path runs it (`GradientPath.carry`); else it is an all-reduce of
    its own after the step (measured: docs/PERFORMANCE.md#the-notice-watchs-cost)."""

    def __init__(self):
        with tf.init_scope():  # Plain local variables, outside any strategy's scope.
            self._raised = tf.Variable(0.0, trainable=False, name="preemption_notice")
            self._agreed = tf.Variable(0.0, trainable=False, name="preemption_agreed")

    def raise_flag(self) -> None:
        """This worker's notice, for the steps that begin from now on."""
        self._raised.assign(1.0)

    @property
    def agreed(self) -> bool:
        """Whether the last step found any worker's flag raised."""
        return bool(self._agreed.numpy() > 0)

    def local(self) -> tf.Tensor:
        """This worker's flag (in a replica): what the all-reduce sums."""
        return self._raised.read_value()

    def take_sum(self, total: tf.Tensor) -> None:
        """The flags' sum over every replica (in a replica, after the all-reduce)."""
        self._agreed.assign(total)

    def around(self, train_step: Callable, path=None) -> Callable:
        """`train_step` (a replica's step) with the flags' sum: carried by `path`, the step's
        `GradientPath` when it runs one every step, else an all-reduce after the step."""
        if path is not None:
            path.carry(self)
            return train_step

        def step_with_agreement(*batch):
            logs = train_step(*batch)
            context = tf.distribute.get_replica_context()
            self.take_sum(context.all_reduce(tf.distribute.ReduceOp.SUM, self.local()))
            return logs

        return step_with_agreement


class PsNotices:
    """The preemption notices parameter-server ps tasks leave in the model dir for the chief
    (`MODEL_DIR/notices/ps:N`): a ps task preempted alone would otherwise serve on unheard until
    its grace ends, and lose its variables with it. The chief looks at most every `POLL_S`."""

    POLL_S = 1.0

    def __init__(self, notices_dir: str):
        self._dir, self._looked_at = notices_dir, float("-inf")
        self.from_task: str | None = None

    @staticmethod
    def leave(notices_dir: str, task: str) -> None:
        """Leaves `task`'s notice (a ps task's, on its notice), never through a link there.

        Raises:
          OutputFileError: something other than a file of ours is at the notice's path.
        """
        storage.makedirs(notices_dir)
        output_files.write_record(os.path.join(notices_dir, task), {"noticed_at": time.time()})

    def clear(self) -> None:
        """Removes the notices an earlier run's ps tasks left (the chief, as a run starts)."""
        storage.remove_tree(self._dir)

    @property
    def received(self) -> bool:
        """Whether a ps task has left a notice (looked for at most every POLL_S)."""
        now = time.monotonic()
        if self.from_task is None and now - self._looked_at >= self.POLL_S:
            self._looked_at = now
            left = sorted(n for n in storage.listdir(self._dir) if not n.startswith("."))
            self.from_task = left[0] if left else None  # Not a notice's temp file (`.ps:0...`).
        return self.from_task is not None


class ScheduledAhead:
    """How far a parameter-server chief schedules training calls ahead of those the workers have
    run: ClusterCoordinator's queue takes an epoch's calls at once, and the chief can save only
    once what it scheduled has run (it joins first), so a chief that scheduled far ahead outlasts
    its grace period (the default job's chief, 1000 steps of 54 ms queued, was still joining when
    the launcher's 15 s ran out). Joining every `limit` calls bounds that wait; the workers idle
    only while the chief schedules the next call after each join."""

    CALLS_PER_WORKER = 16

    def __init__(self, num_workers: int):
        self.limit = self.CALLS_PER_WORKER * num_workers
        self._since_join = 0

    def add(self, coordinator) -> None:
        """Notes a call scheduled on `coordinator`; joins it every `limit` calls."""
        self._since_join += 1
        if self._since_join >= self.limit:
            coordinator.join()
            self._since_join = 0


class Watch:
    """A step loop's view of the notice (tf-keras' `fit` through `SaveOnNotice`, tfdist's Keras 3
    loop, `CustomLoop`): `before_step()` as a step begins, `stop_agreed()` after it ends: whether
    every task stops there (under parameter server: the chief, on its own notice or a ps
    task's); `stops_at_epoch_end()`: whether a notice in validation ends the run at the epoch's
    end (one process only: workers can agree only in a step). Under parameter server the loop
    notes each training call it schedules with `scheduled()`, which keeps the calls ahead few."""

    def __init__(
        self,
        notice: Notice,
        agreement: Agreement | None = None,
        ps_notices: PsNotices | None = None,
        ahead: ScheduledAhead | None = None,
    ):
        self.notice, self._agreement, self._ps_notices = notice, agreement, ps_notices
        self._ahead = ahead

    def around(self, replica_step: Callable, path=None) -> Callable:
        """`replica_step`, with the workers' agreement when there is one: carried by `path`
        (the `GradientPath` the step runs once, if it does), else after the step."""
        if self._agreement is None:
            return replica_step
        return self._agreement.around(replica_step, path)

    def before_step(self) -> None:
        if self._agreement is not None and self.notice.received:
            self._agreement.raise_flag()

    def scheduled(self, coordinator) -> None:
        """Notes a training call scheduled on the parameter-server workers by `coordinator`."""
        if self._ahead is not None:
            self._ahead.add(coordinator)

    def stop_agreed(self) -> bool:
        if self._agreement is not None:
            return self._agreement.agreed
        return self.notice.received or bool(self._ps_notices and self._ps_notices.received)

    def stops_at_epoch_end(self) -> bool:
        return self._agreement is None and self.notice.received


def watch(plan: Plan) -> Watch:
    """The watch for `plan`'s run: `--preemption_signal` and SIGTERM, agreed on in every step
    under multi_worker_mirrored with 2+ workers; under parameter server with a model dir, the
    ps tasks' notices too (an earlier run's are cleared), and the calls scheduled ahead kept
    few."""
    agree = plan.kind is StrategyKind.MULTI_WORKER_MIRRORED and plan.num_workers > 1
    ps_notices = ahead = None
    if plan.kind is StrategyKind.PARAMETER_SERVER:
        ahead = ScheduledAhead(plan.num_workers)
        if plan.model_dir is not None:
            ps_notices = PsNotices(plan.model_dir.notices)
            ps_notices.clear()
    return Watch(
        process_notice.current(),
        Agreement() if agree else None,
        ps_notices,
        ahead,
    )


def stopped(
    epoch: int, step: int | None, save: Callable[[], None] | None, model_dir: str | None
) -> errors.Preempted:
    """Saves with `save` (None: no --model_dir, nothing to save) and returns the one line for a
    run preempted after `step` (from 0; None: the epoch's end) of `epoch` (from 0); signals are
    ignored from then on (`Notice.leaving`)."""
    where = (
        f"epoch {epoch + 1} step {step + 1}"
        if step is not None
        else f"the end of epoch {epoch + 1}"
    )
    if save is None:
        process_notice.current().leaving()
        return errors.Preempted(
            f"preempted at {where}; nothing saved (no --model_dir): pass model_dir=DIR so that "
            "a preempted run resumes where it stopped."
        )
    started = time.perf_counter()
    save()
    process_notice.current().leaving()
    return errors.Preempted(
        f"preempted at {where}; state saved in {time.perf_counter() - started:.2f} s under "
        f"model_dir={model_dir!r}; start the same command again to resume there."
    )


class SaveClock:
    """Times a run's backup saves (each worker's own), keeps the slowest of all the run's
    attempts, a preemption's save included (the results writer records it in
    MODEL_DIR/save_time.json), and after the first save says whether the grace period this
    task's engine gives (`TrainConfig.grace_s`) covers one: known before any notice comes."""

    def __init__(self, plan: Plan):
        self._grace_s = plan.config.train.grace_s
        self._path = (
            plan.model_dir.save_time_json if plan.model_dir and plan.writes_results else None
        )
        earlier = read_record(self._path) if self._path else None
        recorded = earlier.get("slowest_save_s") if isinstance(earlier, dict) else None
        sound = isinstance(recorded, (int, float)) and not isinstance(recorded, bool)
        self.slowest_s = float(recorded) if sound and 0 <= recorded < math.inf else 0.0
        self._saves = 0

    def timed(self, save: Callable[[], object]) -> float:
        """Runs `save`; returns the seconds it took."""
        started = time.perf_counter()
        save()
        took = time.perf_counter() - started
        self._saves += 1
        if self._path and self._saves == 1:
            say_save_time(f"a backup save takes {took:.2f} s", took, self._grace_s)
        if took > self.slowest_s:
            self.slowest_s = took
            if self._path:
                output_files.write_record(self._path, {"slowest_save_s": took})
        return took


def say_save_time(said: str, save_s: float, grace_s: float | None) -> None:
    """Says on stderr `said` (of a save that took `save_s`) and whether the grace period
    `grace_s` (None: unknown) covers it."""
    if grace_s is None:
        verdict = (
            "a preemption's grace period must cover one (30 s on Kubernetes unless `tfdist "
            f"manifest --grace_s` says otherwise, 30 s on GKE spot nodes); set {GRACE_ENV}=S "
            "to have it checked"
        )
    elif save_s < grace_s:
        verdict = (
            f"the grace period of {grace_s:g} s this task's engine gives ({GRACE_ENV}) covers it"
        )
    else:
        verdict = (
            f"past the grace period of {grace_s:g} s this task's engine gives ({GRACE_ENV}): "
            "a preemption would lose the steps since the last complete backup; give the job a "
            "longer grace (`tfdist manifest --grace_s`, `tfdist launch --grace_s`)"
        )
    print(f"tfdist: {said}: {verdict}", file=sys.stderr, flush=True)


def note_cluster_shape(plan: Plan, start: tuple[int, int] | None) -> None:
    """Says, when this run resumes at `start` ((epoch, step) from 0; None: it starts afresh) a
    backup that a cluster of another shape (workers, replicas, global batch) made, as capacity
    that comes back smaller makes it, what the resume keeps and what it does not, a line each;
    then records this run's shape in `--model_dir` (the results writer does)."""
    shape = {
        "num_workers": plan.num_workers,
        "num_replicas": plan.num_replicas,
        "global_batch_size": plan.global_batch_size,
    }
    path = plan.model_dir.cluster_json
    earlier = _read_shape(path) if start is not None else None
    if earlier is not None and earlier != shape:
        mid_epoch = start[1] > 0
        for line in _shape_change(earlier, shape, plan.per_replica_batch_size, mid_epoch):
            print(f"tfdist: {line}", file=sys.stderr, flush=True)
    if plan.writes_results:
        output_files.write_record(path, shape)


def _shape_change(earlier: dict, shape: dict, per_replica: int, mid_epoch: bool) -> list[str]:
    """The lines that say what a resume on another cluster shape keeps and what it does not
    (`mid_epoch`: it resumes within an epoch, whose remaining examples it reads otherwise)."""
    batch, before = shape["global_batch_size"], earlier.get("global_batch_size")
    kept = (
        f"kept: the saved step, the global batch of {batch} ({per_replica} per replica now), "
        "hence the steps per epoch and the learning-rate schedule"
        if batch == before
        else f"kept: the saved step; changed: the global batch, {before} -> {batch}, and with "
        "it the steps per epoch (when the data's size sets them) and the learning-rate schedule"
    )
    examples = (
        "which examples the rest of this epoch reads (each input pipeline skips the steps done "
        "in its own new share, so some of the epoch's examples are read twice and others not "
        "at all; from the next epoch on each is read once an epoch), nor "
        if mid_epoch
        else ""
    )
    return [
        f"resuming a backup made by {_shape(earlier)} on {_shape(shape)}",
        kept,
        f"not kept: {examples}the weights the first cluster would have reached "
        "(docs/preemption.md)",
    ]


def _read_shape(path: str) -> dict | None:
    """The shape an earlier run recorded at `path`; None when there is none to read (a damaged
    record is no reason to stop a resume)."""
    earlier = read_record(path)
    if not isinstance(earlier, dict):
        return None
    counts = [earlier.get(key) for key in _SHAPE_KEYS]
    # Only counts are ever shown: what else is there (a planted record's text) is not a shape.
    return earlier if all(_is_count(count) for count in counts) else None


_SHAPE_KEYS = ("num_workers", "num_replicas", "global_batch_size")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 40


def _shape(shape: dict) -> str:
    return (
        f"{shape.get('num_workers')} worker(s) of {shape.get('num_replicas')} replica(s) in all "
        f"with a global batch of {shape.get('global_batch_size')}"
    )
