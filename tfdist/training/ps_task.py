"""Parameter-server `worker` and `ps` tasks (`Role.SERVE`): serve until the chief is done,
then exit 0 instead of serving forever (`tfdist.cluster.liveness`). `fit` does it on such a
task; a custom loop calls `serve` itself. A preemption notice does not stop a server while the
chief runs: it serves on while the chief saves, then ends as preempted (exit 75); a ps task
leaves its notice in the model dir, so that the chief, told or not, stops at a step and saves
(`preemption.PsNotices`). Once the chief is gone (failed or restarting), a notice ends a server
at once, exit 75 with nothing to save; once it has finished, exit 0 (`tfdist.runtime.notice`)."""

from tfdist import errors
from tfdist import strategies
from tfdist.cluster.liveness import ChiefWatch
from tfdist.cluster.liveness import chief_address
from tfdist.cluster.probe import answers
from tfdist.runtime import notice as process_notice
from tfdist.runtime.config import ConfigError
from tfdist.runtime.setup import Plan
from tfdist.runtime.setup import Role
from tfdist.runtime.setup import require_plan
from tfdist.strategies import TaskType
from tfdist.training import preemption

FIRST_CONTACT_TIMEOUT_S = 600.0
_POLL_S = 0.2  # How soon a notice is acted on (the chief watch probes every PROBE_EVERY_S).


def serve(plan: Plan) -> dict:
    """A parameter-server worker's or ps task's part of the run: runs its server until the
    chief has come and gone; returns {"task", "role"}.

    Example (a custom loop's main):
      >>> plan = tfdist.setup(tfdist.config_from_flags())
      >>> if plan.role is tfdist.Role.SERVE:
      ...     return tfdist.serve(plan)

    Raises:
      ConfigError: `plan` is not a serving task's, or the chief never answered within
        `FIRST_CONTACT_TIMEOUT_S`.
    """
    require_plan(plan)
    if plan.role is not Role.SERVE:
        raise ConfigError(
            f"serve: {plan.task} has role {plan.role.value}, not serve; call it "
            "only when plan.role is tfdist.Role.SERVE (a parameter-server worker "
            "or ps task)."
        )
    cluster = plan.config.cluster
    server = strategies.start_server(cluster)
    chief = chief_address(cluster)
    print(
        f"tfdist: {plan.task} serving at {cluster.task_address} until the chief at {chief} "
        "finishes",
        flush=True,
    )
    watch = ChiefWatch(chief).start()
    notice = process_notice.current()
    notice.training()  # The chief saves on its notice, reading this task's variables.
    chief_saving = None  # On a notice: whether the chief still ran then (and so saves).
    while not watch.wait_finished(_POLL_S):
        if notice.received:
            if chief_saving is None:
                chief_saving = answers(chief)
                if chief_saving and cluster.task.type is TaskType.PS and plan.model_dir:
                    # The chief stops at a step and saves on it (a worker's is not needed:
                    # the coordinator retries a lost worker's steps).
                    preemption.PsNotices.leave(plan.model_dir.notices, plan.task)
            if not chief_saving or not answers(chief):  # Nothing left to serve.
                break
        if watch.unseen_for_s() > FIRST_CONTACT_TIMEOUT_S:
            raise ConfigError(
                f"chief at {chief} did not answer within "
                f"{FIRST_CONTACT_TIMEOUT_S:g} s; start the chief task (or check "
                "TF_CONFIG with `tfdist doctor`)."
            )
    if chief_saving is False:
        notice.leaving()
        raise errors.Preempted(
            f"preempted ({notice.signal_name}) while serving, with the chief at {chief} gone: "
            "nothing to save on this task; start the same command again."
        )
    print(f"tfdist: {plan.task}: the chief at {chief} has finished; stopping", flush=True)
    del server
    if chief_saving:
        notice.leaving()
        raise errors.Preempted(
            f"preempted ({notice.signal_name}): {plan.task} served on until the chief at {chief} "
            "had saved; start the same command again to resume."
        )
    notice.finished("(its chief finished)")  # A notice as the chief finished: exit 0 here.
    return {"task": plan.task, "role": plan.role.value}
