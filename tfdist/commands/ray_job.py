"""`tfdist ray -- COMMAND`: the command after `--` (a tfdist command, `train ...`, or a program,
`python my_train.py ...`) run by every worker of a Ray Train run, with its TF_CONFIG
(`tfdist.cluster.ray_train`), on a local Ray started for the run or on a running Ray cluster
(`--address`); exits 0 when the run finished, 1 when Ray gave up on it."""

import functools
import os
import re
import signal
import sys
import threading
from collections.abc import Callable

from absl import flags

from tfdist import errors
from tfdist.cluster import GRACE_ENV
from tfdist.cluster import launcher
from tfdist.cluster.manifests import checks
from tfdist.cluster import processes
from tfdist.cluster import probe
from tfdist.cluster import ray_train
from tfdist.cluster.supervisor import Supervisor
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands import train_flags
from tfdist.runtime import keras_env
from tfdist.runtime import ray_env
from tfdist.runtime import tf_import

_ADDRESS = flags.DEFINE_string(
    "address",
    None,
    "ray: the Ray cluster to run on, as `ray.init` takes it (auto: the one this machine "
    "belongs to; ray://HOST:10001: a remote one); unset starts a local Ray for the run.",
)
_CPUS_PER_WORKER = flags_lib.define_float(
    "cpus_per_worker", 1.0, "ray: CPUs Ray reserves for each worker.", lower_bound=0.0
)
_START_TIMEOUT_S = flags_lib.define_duration(
    "start_timeout_s",
    60.0,
    "ray: how long Ray Train waits for the run's workers to be placed and started; a group "
    "that does not start in time (a lost node without a replacement, no room on the cluster) "
    "counts as one of --max_restarts, so such a run ends within about (max_restarts + 1) "
    "times this.",
)
flags_lib.register(
    "ray",
    flags_lib.group(
        cli_flags.NUM_WORKERS,
        cli_flags.GPUS_PER_TASK,
        _CPUS_PER_WORKER,
        cli_flags.MAX_RESTARTS,
        _START_TIMEOUT_S,
        cli_flags.NAME,
        _ADDRESS,
        cli_flags.TIMEOUT_S,
        train_flags.KERAS,
    ),
)
_POLL_S = 0.2
# A Ray job's entrypoint has this variable; `ray job stop` kills it after the other's seconds.
_RAY_JOB_ENV, _JOB_STOP_WAIT_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR", "RAY_JOB_STOP_WAIT_TIME_S"
# Measured (docs/ray.md): 8 s from the signal to the exit around a save of 0.05 s, most of it
# Ray's shutdown; a save may take up to the programs' grace before it.
_JOB_STOP_NEEDS_S = processes.STOP_GRACE_S + 8
_REACH_S = 10.0  # The longest a Ray address may take to take a connection.
_ADDRESS_RE = re.compile(r"auto|local|(ray://)?[A-Za-z0-9][A-Za-z0-9.-]{0,252}:[0-9]{1,5}")


def main(command: list[str], *, tfdist_commands) -> int:
    """Runs `command` on every worker of a Ray Train run the flags describe; returns 0 when it
    finished, 1 when it failed past `--max_restarts` (one line says why).

    Raises:
      RayUnavailable, LaunchError and the train flags' errors: the run cannot start.
    """
    if not command:
        raise errors.UsageError(
            "ray needs the command every worker runs after `--`, e.g. `tfdist ray "
            "--num_workers=2 -- train --strategy=multi_worker_mirrored`."
        )
    # Each worker's lines as they are, not folded into "[repeated 2x across cluster]": read
    # when Ray is imported, which finding Ray does.
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray_train.require_ray()
    # Read before checking the train flags, which parses FLAGS anew for `tfdist train`.
    address, name, timeout_s = _ADDRESS.value, cli_flags.NAME.value, cli_flags.TIMEOUT_S.value
    start_timeout_s = _START_TIMEOUT_S.value
    keras, tf_logs = train_flags.keras(), train_flags.show_tf_logs()
    scaling = {
        "num_workers": cli_flags.NUM_WORKERS.value,
        "gpus_per_worker": cli_flags.GPUS_PER_TASK.value,
        "cpus_per_worker": _CPUS_PER_WORKER.value,
        "max_failures": cli_flags.MAX_RESTARTS.value,
    }
    if scaling["cpus_per_worker"] <= 0:
        raise errors.UsageError(
            f"cpus_per_worker={scaling['cpus_per_worker']:g} reserves no CPU, which Ray "
            "refuses; pass more than 0, e.g. 1 (or 0.5: fractions share a CPU)."
        )
    _check_address(address)
    # The same name as the run's JobSet or Slurm job: a DNS label, also a safe directory name
    # for Ray's record of the run.
    checks.check_k8s_name("name", name)
    if command[0] == "train":
        train_flags.check_train_args(command[1:])  # Before Ray starts.
    launcher.resolve_command(tuple(command), tfdist_commands)  # A missing program: one line.
    # No TensorFlow here: Ray Train's DataParallelTrainer imports none in the driver (Ray's
    # TensorflowTrainer did). Should anything import it, it comes quiet and of this flavour.
    keras_env.select(keras)
    if not tf_logs:
        tf_import.quiet_when_imported()
    _warn_short_job_stop()
    runtime_env = ray_env.ray_runtime_env(keras, tf_logs)
    import ray  # pylint: disable=import-outside-toplevel

    # With SIGINT and SIGTERM blocked in the threads Ray starts, so that only this one, the
    # main thread, takes them (Ray's own answer ends the driver with status 1); the supervisor's
    # handlers replace Ray's.
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        ray.init(address=address, include_dashboard=False, runtime_env=runtime_env)
    except ConnectionError as error:  # `auto` with no cluster here; one gone since the check.
        raise errors.UsageError(
            f"address={address}: Ray found no cluster there ({ray_train.first_line(error)}); "
            "start one (`ray start --head`), or leave --address unset for a local Ray."
        ) from None
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    _check_resources(scaling)
    stop = ray_train.stop_request()
    trainer = ray_train.trainer(
        checks.bounded(command),  # A hung worker fails its peers' step: Ray restarts them.
        **scaling,
        name=name,
        runtime_env=runtime_env,
        # The grace a stopped run gives its programs (`_ended_on_stop`).
        program_env={**keras_env.environment(keras), GRACE_ENV: f"{processes.STOP_GRACE_S:g}"},
        tfdist_commands=tfdist_commands,
        stop=stop,
    )
    # The program's relative paths mean where Ray starts the workers: this directory on a local
    # Ray, the job's working directory on a cluster (`ray job submit --working-dir`), not the
    # run's artifacts directory that Ray Train would change each worker to. Read by `fit`.
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
    os.environ[ray_train.START_TIMEOUT_ENV] = f"{start_timeout_s:g}"  # For Ray Train's controller.
    supervisor = Supervisor("tfdist ray", timeout_s=timeout_s, everything="the run")
    fit = _Fit(trainer)
    runner = threading.Thread(target=fit, name="ray-train-fit", daemon=True)
    status = supervisor.run(
        lambda: _wait(
            fit,
            runner,
            supervisor,
            f"Ray Train run {name}",
            scaling["num_workers"],
            address,
            why_failed=functools.partial(
                _why_failed,
                stop=stop,
                tries=scaling["max_failures"] + 1,
                start_timeout_s=start_timeout_s,
            ),
        ),
        setting_up="stopped the run",
        ended_on_stop=lambda: _ended_on_stop(fit, runner, stop),
    )
    if _in_flight(fit, runner):
        # Stopped by a signal or the time limit while Ray's wait goes on in `runner`, which
        # would end this process with status 1 once Ray is shut down under it: so what this
        # process started (a local Ray: its daemons and the run's workers) is killed, and the
        # process ends with its own status. On a cluster, the driver's end ends its actors.
        ray_train.kill_descendants()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    ray.shutdown()
    return status


def _check_address(address: str | None) -> None:
    """Raises UsageError unless `address` is one `ray.init` takes: auto, local, HOST:PORT or
    ray://HOST:PORT, and a HOST:PORT answers within `_REACH_S` (Ray would wait on it for
    minutes, then trace back)."""
    if address is None or address in ("auto", "local"):
        return
    host_port = address.removeprefix("ray://")
    if not _ADDRESS_RE.fullmatch(address) or not 1 <= int(host_port.rpartition(":")[2]) <= 65535:
        raise errors.UsageError(
            f"address={errors.shown(address)} is not a Ray address; pass auto (the cluster this "
            "machine belongs to), HOST:PORT of its head (port 6379, from 1 to 65535), "
            "ray://HOST:10001 (a remote one), or leave it unset for a local Ray."
        )
    why = probe.unreachable(host_port, timeout_s=_REACH_S)
    if why:
        raise errors.UsageError(
            f"address={address}: nothing there takes a connection: it {why}; start Ray's head "
            "there (`ray start --head`), pass the address of a running one (`ray status` on "
            "its head shows it), or leave --address unset for a local Ray."
        )


def _warn_short_job_stop() -> None:
    """Says on stderr when this `tfdist ray` is a Ray job that `ray job stop` kills before a
    stopped run can save: Ray's job supervisor sends SIGTERM, then SIGKILL after
    RAY_JOB_STOP_WAIT_TIME_S (3 s unless the head's environment sets it), where a stop takes
    up to the programs' grace (`STOP_GRACE_S`) and Ray's shutdown after it."""
    if _RAY_JOB_ENV not in os.environ:  # Not started by `ray job submit`.
        return
    wait_s = os.environ.get(_JOB_STOP_WAIT_ENV, "3")
    if wait_s.isdigit() and int(wait_s) >= _JOB_STOP_NEEDS_S:
        return
    print(
        f"tfdist ray: warning: `ray job stop` kills this job {wait_s} s after its SIGTERM "
        f"({_JOB_STOP_WAIT_ENV} on the head), but a stopped run takes up to "
        f"{_JOB_STOP_NEEDS_S:g} s to save and end ({processes.STOP_GRACE_S:g} s for the "
        f"programs, then Ray's shutdown); start the head with {_JOB_STOP_WAIT_ENV}=30 to keep "
        "what a stop saves",
        file=sys.stderr,
        flush=True,
    )


def _check_resources(scaling: dict) -> None:
    """Raises UsageError unless each worker's CPUs and GPUs fit on one node of the Ray cluster
    `ray.init` joined (Ray would wait for such a node for ever)."""
    import ray  # pylint: disable=import-outside-toplevel

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    for resource, key, flag in (
        ("CPU", "cpus_per_worker", "cpus_per_worker"),
        ("GPU", "gpus_per_worker", "gpus_per_task"),
    ):
        most = max((node.get(resource, 0) for node in nodes), default=0)
        if scaling[key] > most:
            raise errors.UsageError(
                f"{flag}={scaling[key]:g}: no node of the Ray cluster has that many "
                f"{resource}s (the most a node has is {most:g}), so no worker would start; "
                f"pass at most {most:g}, or add a node with more."
            )


class _Fit:
    """`trainer.fit()`, called in a thread of its own; then `error` is what it raised. `done` is
    set when it returned: Python 3.11's `Thread.is_alive()` says False for good once a signal's
    exception interrupted a `join()` of the thread (its state lock is released then), so the
    thread is not asked."""

    def __init__(self, trainer):
        self.trainer, self.error = trainer, None
        self.done = threading.Event()

    def __call__(self) -> None:
        try:
            self.trainer.fit()
        except Exception as error:  # pylint: disable=broad-except  # Ray's run failed: said.
            self.error = error
        finally:
            self.done.set()


def _in_flight(fit: _Fit, runner: threading.Thread) -> bool:
    """Whether `runner` started `fit` and it has not returned."""
    return runner.ident is not None and not fit.done.is_set()


def _ended_on_stop(fit: _Fit, runner: threading.Thread, stop) -> set[int]:
    """Asks every worker to send its program a preemption notice, and waits up to the grace
    period for the run to end; the programs' exit statuses then (75: saved; 0: finished), none
    when the run did not end or failed."""
    import ray  # pylint: disable=import-outside-toplevel

    if not _in_flight(fit, runner):  # Stopped before the run, or after it.
        return set()
    try:
        stop.ask.remote()
        if not fit.done.wait(processes.STOP_GRACE_S) or fit.error is not None:
            return set()
        statuses = ray.get(stop.ended_statuses.remote(), timeout=_POLL_S * 10)
    except ray.exceptions.RayError:  # The request's actor is gone with Ray.
        return set()
    return set(statuses.values())


def _process_age_s() -> float:
    """Seconds since this process started (Linux's /proc)."""
    started_ticks = int(ray_train.proc_stat()[19])  # Field 22: starttime.
    with open("/proc/uptime", encoding="ascii") as uptime:
        return float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")


def _why_failed(error: Exception, *, stop, tries: int, start_timeout_s: float) -> str:
    """What ended the failed run, in one line: workers that did not start, with the nodes that
    ran them and are gone, or Ray's own cause."""
    if not ray_train.did_not_start(error):
        return ray_train.cause(error)
    import ray  # pylint: disable=import-outside-toplevel

    try:
        lost = ray_train.lost_nodes(stop)
    except ray.exceptions.RayError:  # Its actor was on a lost node too.
        lost = []
    gone = f"; gone since they started: node(s) {', '.join(lost)}" if lost else ""
    return (
        f"its workers did not start within {start_timeout_s:g} s, {tries} time(s){gone}; add a "
        "node with room for them, or raise --start_timeout_s or --max_restarts"
    )


def _wait(
    fit: _Fit,
    runner: threading.Thread,
    supervisor: Supervisor,
    run: str,
    num_workers: int,
    address: str | None,
    *,
    why_failed: Callable[[Exception], str],
) -> int:
    """Starts `runner` (`fit`'s thread) and waits for it, checking the supervisor's signals and
    time limit; says how the run ended (`why_failed`: what ended it, from Ray's error)."""
    runner.start()
    while not fit.done.wait(_POLL_S):
        supervisor.checkpoint()
    where = "a local Ray" if address is None else f"Ray at {address}"
    # From this process's start: Ray's and the workers' start-up are part of the run's cost.
    took = f"in {_process_age_s():.0f} s"
    if fit.error is not None:
        supervisor.say(f"{run} failed on {where} {took}: {why_failed(fit.error)}")
        return errors.RunFailure.exit_status
    supervisor.say(f"{run} finished on {where} with {num_workers} worker(s) {took}", error=False)
    return 0
