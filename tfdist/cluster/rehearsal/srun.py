"""`srun` in a rehearsed Slurm job: runs one job step, each task on its emulated node with the
variables srun gives a task, output prefixed `[task N]` and kept in `task-N.log`; waits for every
task (with -K/--kill-on-bad-exit, stops the rest once one fails) and exits with the worst status.

    srun [-n N|--ntasks=N] [-K|--kill-on-bad-exit] COMMAND [ARGS...]
"""

import json
import os
import sys
import threading

from tfdist.cluster import processes
from tfdist.cluster import supervisor
from tfdist.cluster.rehearsal import slurm_run
from tfdist.cluster.rehearsal.hosts import Host

EXIT_USAGE = 2


def _options(argv: list[str]) -> tuple[int, bool, list[str]]:
    """(tasks, kill on bad exit, command) from srun's argv; exits 2 on what is not rehearsed."""
    num_tasks, kill = int(os.environ["SLURM_NTASKS"]), False
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option in ("-K", "--kill-on-bad-exit", "--kill-on-bad-exit=1"):
            kill = True
        elif option.startswith("--ntasks=") or option == "-n":
            value = option.partition("=")[2] or (argv.pop(0) if argv else "")
            if not (value.isascii() and value.isdigit()) or not 0 < int(value) <= num_tasks:
                _refuse(f"--ntasks={value} is not from 1 to the job's {num_tasks} tasks")
            num_tasks = int(value)
        else:
            _refuse(
                f"option {option} is not rehearsed (only -n/--ntasks and -K/--kill-on-bad-exit are)"
            )
    if not argv:
        _refuse("no command to run")
    return num_tasks, kill, argv


def _refuse(problem: str) -> None:
    print(f"srun (tfdist rehearse): {problem}.", file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)


def main(argv: list[str]) -> int:
    num_tasks, kill, command = _options(list(argv))
    nodes = [
        Host(name, (name,), address, namespace)
        for name, address, namespace in json.loads(os.environ[slurm_run.ENV_NODES])
    ]
    nodes = nodes[:num_tasks]
    layout = slurm_run.block_layout(num_tasks, len(nodes))
    names = [node.hostname for node in nodes]
    step = {
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NUM_TASKS": str(num_tasks),
        "SLURM_NTASKS": str(num_tasks),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NODELIST": slurm_run.host_list(names),
        "SLURM_STEP_TASKS_PER_NODE": slurm_run.tasks_per_node(layout),
    }
    lock = threading.Lock()
    log_dir = os.environ[slurm_run.ENV_LOG_DIR]
    tasks, rank = {}, 0
    for node_id, (node, count) in enumerate(zip(nodes, layout)):
        for local_id in range(count):
            env = dict(
                os.environ,
                **step,
                SLURM_PROCID=str(rank),
                SLURM_LOCALID=str(local_id),
                SLURM_NODEID=str(node_id),
                SLURMD_NODENAME=node.hostname,
            )
            tasks[f"task {rank}"] = (
                node.hostname,
                processes.Process(
                    f"task {rank}",
                    [*node.enter(), *command],
                    env,
                    os.path.join(log_dir, f"task-{rank}.log"),
                    lock,
                    announcer="srun",
                ),
            )
            rank += 1

    def start(name: str) -> processes.Process:
        node, task = tasks[name]
        task.start(f" on {node}")
        return task

    def on_failure(name: str, status: int, restarts: int) -> supervisor.Fail | None:
        del restarts  # srun restarts nothing.
        return (
            supervisor.Fail(
                f"{name} {supervisor.ended(status)}; stopping the step (--kill-on-bad-exit)"
            )
            if kill
            else None
        )

    watcher = supervisor.Supervisor("srun", timeout_s=None, everything="the step")
    worst = watcher.run(
        lambda: watcher.watch(
            supervisor.Group(tuple(tasks), start, on_failure, closing=lambda status, seconds: None)
        )
    )
    for name, (_, task) in tasks.items():  # Each has ended: the supervisor stops what runs.
        status = supervisor.exit_status(task.poll())
        if status:
            print(
                f"srun: error: {name}: exited with exit code {status}", file=sys.stderr, flush=True
            )
        worst = max(worst, status)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
