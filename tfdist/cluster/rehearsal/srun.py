"""`srun` in a rehearsed Slurm job: runs one job step, each task on its emulated node with the
variables srun gives a task, output prefixed `[task N]` and kept in `task-N.log`; waits for every
task (with -K/--kill-on-bad-exit, stops the rest once one fails) and exits with the worst status.

    srun [-n N|--ntasks=N] [-K|--kill-on-bad-exit] COMMAND [ARGS...]
"""

import json
import os
import sys
import threading
import time

from tfdist.cluster import processes
from tfdist.cluster.rehearsal import slurm_run
from tfdist.cluster.rehearsal.hosts import Host

EXIT_USAGE = 2
_POLL_S = 0.2


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
            _refuse(f"option {option} is not rehearsed (only -n/--ntasks and "
                    "-K/--kill-on-bad-exit are)")
    if not argv:
        _refuse("no command to run")
    return num_tasks, kill, argv


def _refuse(problem: str) -> None:
    print(f"srun (tfdist rehearse): {problem}.", file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)


def main(argv: list[str]) -> int:
    num_tasks, kill, command = _options(list(argv))
    nodes = [Host(name, (name,), address, namespace)
             for name, address, namespace in json.loads(os.environ[slurm_run.ENV_NODES])]
    nodes = nodes[:num_tasks]
    layout = slurm_run.block_layout(num_tasks, len(nodes))
    names = [node.hostname for node in nodes]
    step = {"SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
            "SLURM_STEP_NUM_TASKS": str(num_tasks), "SLURM_NTASKS": str(num_tasks),
            "SLURM_STEP_NUM_NODES": str(len(nodes)),
            "SLURM_STEP_NODELIST": slurm_run.host_list(names),
            "SLURM_STEP_TASKS_PER_NODE": slurm_run.tasks_per_node(layout)}
    lock = threading.Lock()
    log_dir = os.environ[slurm_run.ENV_LOG_DIR]
    tasks, rank = [], 0
    for node_id, (node, count) in enumerate(zip(nodes, layout)):
        for local_id in range(count):
            env = dict(os.environ, **step, SLURM_PROCID=str(rank), SLURM_LOCALID=str(local_id),
                       SLURM_NODEID=str(node_id), SLURMD_NODENAME=node.hostname)
            tasks.append(processes.Process(
                f"task {rank}", [*node.enter(), *command], env,
                os.path.join(log_dir, f"task-{rank}.log"), lock, announcer="srun"))
            rank += 1
    try:
        with processes.stop_on_signals():
            for task, node in zip(tasks, (n for n, c in zip(nodes, layout) for _ in range(c))):
                task.start(f" on {node.hostname}")
            return _wait(tasks, kill)
    except processes.Stopped as stop:
        processes.stop_all(tasks)
        return 128 + stop.signum


def _wait(tasks: list[processes.Process], kill: bool) -> int:
    worst = 0
    while any(task.poll() is None for task in tasks):
        failed = [task for task in tasks if task.poll() not in (None, 0)]
        if failed and kill:
            print(f"srun: {failed[0].name} exited with status {failed[0].poll()}; stopping the "
                  "step (--kill-on-bad-exit)", file=sys.stderr, flush=True)
            processes.stop_all(tasks)
            break
        time.sleep(_POLL_S)
    processes.stop_all(tasks)  # Collects the output of those that ended.
    for task in tasks:
        status = task.poll()
        status = status if status >= 0 else 128 - status
        if status:
            print(f"srun: error: {task.name}: exited with exit code {status}", file=sys.stderr,
                  flush=True)
        worst = max(worst, status)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
