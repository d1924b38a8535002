"""A real Slurm cluster on emulated hosts: Debian's `slurm-wlm` daemons, not an imitation.

munged runs with a key, socket and files of its own in the cluster's directory (slurm.conf's
`AuthInfo=socket=PATH`: a path, so every namespace reaches it); slurmctld runs on a host of its own
(`slurmctl`) and one slurmd on each node, each an emulated host (`hosts.Hosts`) with its own
address, hosts file and hostname. `ip netns exec` does not work for slurmd (it remounts /sys,
hiding /sys/fs/cgroup, and slurmd 22.05 then refuses to start), so each daemon starts under
`unshare --mount --uts` with the host's hosts file bound over /etc/hosts and its hostname set,
then enters the host's network namespace; job steps inherit all three, so a task sees its node's
name and resolves its peers by name. Client commands (sbatch, squeue, scancel) run in the
controller's namespace with SLURM_CONF pointing at the cluster's slurm.conf. Job steps reserve
ports from `MpiParams=ports=12000-12999` (`srun --resv-ports`), as many sites' steps can. With
`accounting`, slurmdbd and a MariaDB server of the cluster's own keep every job's record for
`sacct` (`slurm_accounting`).

Closing stops the daemons by pid, then removes the hosts (killing whatever still runs in them:
job steps) and the directory's sockets. Linux, root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from collections.abc import Sequence

from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.cluster.rehearsal import slurm_accounting
from tfdist.cluster.rehearsal.hosts import NoHosts

CONTROLLER = "slurmctl"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun")
INSTALL = "apt-get install slurm-wlm munge"
_READY_S = 60.0
_COMMAND_S = 60.0
_STOP_S = 10.0
_POLL_S = 0.25
RESERVED_PORTS = "12000-12999"
# After a requeued job turns PENDING, before it may be started at once: Slurm stamps credentials
# and their revocation in whole seconds, and refuses a credential stamped in the second of the
# revocation (src/common/slurm_cred.c, 22.05).
REQUEUE_SETTLE_S = 2.0
DONE_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "LAUNCH_FAILED",
)


def missing() -> str | None:
    """What this machine lacks to run a real Slurm cluster (a daemon or client not on PATH),
    else None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    return ", ".join(absent) if absent else None


def require_slurm() -> None:
    """Raises NoHosts, in one line that says how to install it, unless Slurm is installed."""
    absent = missing()
    if absent:
        raise NoHosts(
            f"a real Slurm cluster needs {absent}, which this machine lacks; install "
            f"Debian's slurm-wlm and munge ({INSTALL}) as root."
        )


class SlurmCluster:
    """slurmctld and one slurmd per node, on emulated hosts, with munge; `close` (or leaving the
    `with`) stops and removes everything.

    Attributes:
      nodes: the node names, in the order given (Slurm lists them in its own, numeric, order).
      directory: where slurm.conf, the daemons' logs and state and munge's key live.
      sockets: a short directory of its own under /tmp for the daemons' spools and munge's
        (and MariaDB's) socket (a Unix socket's path has at most 107 bytes, which a deep
        `directory` passes: slurmstepd then fails and the job is requeued forever); removed on
        close.
      accounting: whether slurmdbd keeps every job's record, for `sacct`.
    """

    def __init__(
        self,
        nodes: Sequence[str],
        directory: str,
        *,
        cpus_per_node: int = 2,
        checkpoint: Callable[[], None] | None = None,
        accounting: bool = False,
    ):
        """Starts the cluster and waits (at most _READY_S) until every node is idle (and, with
        `accounting`, slurmdbd answers).

        Raises:
          NoHosts: this machine cannot emulate hosts, Slurm (or, with `accounting`, slurmdbd or
            MariaDB) is not installed, or the cluster did not come up (its logs are named).
        """
        self.nodes, self.directory = list(nodes), os.path.abspath(directory)
        self.accounting = accounting
        self.sockets = tempfile.mkdtemp(prefix="tfdist-slurm-", dir="/tmp")
        self._daemons: list[subprocess.Popen] = []
        self._names: dict[int, str] = {}  # By pid: "slurmd on node1".
        self._hosts: hosts_lib.Hosts | None = None
        require_slurm()
        if accounting:
            slurm_accounting.require()
        try:
            self._start(cpus_per_node, checkpoint or (lambda: None))
        except BaseException:
            self.close()
            raise

    @property
    def conf(self) -> str:
        return os.path.join(self.directory, "slurm.conf")

    def _start(self, cpus_per_node: int, checkpoint: Callable[[], None]) -> None:
        os.makedirs(os.path.join(self.directory, "state"), exist_ok=True)
        for node in self.nodes:
            os.makedirs(os.path.join(self.sockets, node), exist_ok=True)
        socket = self._start_munge()
        self._hosts = hosts_lib.Hosts(
            [(CONTROLLER,), *((node,) for node in self.nodes)], checkpoint=checkpoint
        )
        self._controller, *nodes = self._hosts.hosts
        with open(self.conf, "w", encoding="utf-8") as conf:
            conf.write(self._slurm_conf(socket, nodes, cpus_per_node))
        if self.accounting:
            self._start_accounting(socket)
        self._daemons.append(self._on(self._controller, ["slurmctld", "-D", "-f", self.conf]))
        for host in nodes:
            self._daemons.append(
                self._on(host, ["slurmd", "-D", "-N", host.hostname, "-f", self.conf])
            )
        deadline = time.monotonic() + _READY_S
        while not self._all_idle():
            checkpoint()
            if time.monotonic() > deadline or any(d.poll() is not None for d in self._daemons):
                raise NoHosts(
                    f"the Slurm cluster in {self.directory} did not come up within {_READY_S:g} s"
                    " (a daemon ended or a node is not idle); read slurmctld.log and "
                    "slurmd-NODE.log there."
                )
            time.sleep(_POLL_S)

    def _start_munge(self) -> str:
        key = os.path.join(self.directory, "munge.key")
        with open(key, "wb") as key_file:
            key_file.write(os.urandom(1024))
        os.chmod(key, 0o400)
        socket = os.path.join(self.sockets, "munge.socket")
        files = {name: os.path.join(self.directory, f"munged.{name}") for name in ("pid", "log")}
        self._daemons.append(
            subprocess.Popen(  # pylint: disable=consider-using-with
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={socket}",
                    f"--key-file={key}",
                    f"--pid-file={files['pid']}",
                    f"--log-file={files['log']}",
                    f"--seed-file={os.path.join(self.directory, 'munged.seed')}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self._wait_for(
            lambda: os.path.exists(socket), f"munged did not start; read {files['log']}."
        )
        return socket

    def _start_accounting(self, munge_socket: str) -> None:
        """Starts MariaDB, then slurmdbd, on the controller's host (which closing removes with
        whatever still runs there), and waits until slurmdbd answers."""
        database = os.path.join(self.sockets, "mariadb.socket")
        log = os.path.join(self.directory, "mariadbd.log")
        argv = slurm_accounting.database_argv(self.directory, database)
        self._daemons.append(self._on(self._controller, argv))
        self._wait_for(lambda: os.path.exists(database), f"mariadbd did not start; read {log}.")
        conf = os.path.join(self.directory, "slurmdbd.conf")
        with open(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(slurm_accounting.slurmdbd_conf(self.directory, munge_socket))
        self._daemons.append(
            self._on(self._controller, ["slurmdbd", "-D"], MYSQL_UNIX_PORT=database)
        )
        self._wait_for(
            lambda: self.command("sacctmgr", "--noheader", "list", "cluster").returncode == 0,
            f"slurmdbd did not start; read slurmdbd.log and mariadbd.log in {self.directory}.",
        )

    def _wait_for(self, ready: Callable[[], bool], failure: str) -> None:
        """Waits (at most _READY_S) until `ready()`, the daemon started last still running.

        Raises:
          NoHosts: `failure`, once the daemon ended or the time is up.
        """
        deadline = time.monotonic() + _READY_S
        while not ready():
            if time.monotonic() > deadline or self._daemons[-1].poll() is not None:
                raise NoHosts(failure)
            time.sleep(0.05)

    def _slurm_conf(self, socket: str, nodes: list[hosts_lib.Host], cpus: int) -> str:
        directory = self.directory
        lines = [
            "ClusterName=tfdist",
            f"SlurmctldHost={CONTROLLER}({self._controller.address})",
            "AuthType=auth/munge",
            f"AuthInfo=socket={socket}",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={directory}/state",
            f"SlurmdSpoolDir={self.sockets}/%n",
            f"SlurmctldPidFile={directory}/slurmctld.pid",
            f"SlurmdPidFile={directory}/slurmd-%n.pid",
            f"SlurmctldLogFile={directory}/slurmctld.log",
            f"SlurmdLogFile={directory}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            f"MpiParams=ports={RESERVED_PORTS}",  # What srun --resv-ports reserves steps from.
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            *(
                slurm_accounting.slurm_conf_lines(self._controller.address, socket)
                if self.accounting
                else ["AccountingStorageType=accounting_storage/none"]
            ),
            "KillWait=5",
            "MinJobAge=300",
            *(
                f"NodeName={h.hostname} NodeAddr={h.address} CPUs={cpus} State=UNKNOWN"
                for h in nodes
            ),
            "PartitionName=rehearsal Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    def _on(self, host: hosts_lib.Host, argv: list[str], **env: str) -> subprocess.Popen:
        """Starts daemon `argv` on `host`: its hosts file, hostname and network; `env` added to
        its environment."""
        script = (
            'mount --bind "$1" /etc/hosts && hostname "$2" && '
            'exec nsenter --net="/run/netns/$3" "${@:4}"'
        )
        log = os.path.join(self.directory, f"{argv[0]}-{host.hostname}.out")
        with open(log, "wb") as output:
            daemon = subprocess.Popen(  # pylint: disable=consider-using-with
                [
                    "unshare",
                    "--mount",
                    "--uts",
                    "bash",
                    "-c",
                    script,
                    "bash",
                    os.path.join(hosts_lib.NETNS_DIR, host.namespace, "hosts"),
                    host.hostname,
                    host.namespace,
                    *argv,
                ],
                env=dict(self.environment(), **env),
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self._names[daemon.pid] = f"{argv[0]} on {host.hostname}"
        return daemon

    def stopped_daemon(self) -> str | None:
        """The first of the cluster's daemons that has exited ("slurmctld on slurm-ctl"), else
        None."""
        for daemon in self._daemons:
            if daemon.poll() is not None:
                return self._names.get(daemon.pid, "munged")
        return None

    def environment(self) -> dict[str, str]:
        """This process's environment with the cluster's slurm.conf (what sbatch passes on to
        a job, --export=ALL), less the SLURM_* variables of a Slurm job this process may run
        in (a rehearsal inside salloc): its job id, step and reserved ports are not the
        rehearsed job's."""
        own = {name: value for name, value in os.environ.items() if not name.startswith("SLURM_")}
        return dict(own, SLURM_CONF=self.conf)

    def command(self, *argv: str, timeout_s: float = _COMMAND_S) -> subprocess.CompletedProcess:
        """Runs Slurm client command `argv` (sbatch, squeue, scancel, scontrol) against the
        cluster; its output as text."""
        return subprocess.run(
            ["nsenter", f"--net=/run/netns/{self._controller.namespace}", *argv],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def _all_idle(self) -> bool:
        states = self.command("sinfo", "--noheader", "--Node", "--format=%N %T").stdout.split()
        return len(states) == 2 * len(self.nodes) and all(state == "idle" for state in states[1::2])

    def submit(self, script: str, *options: str) -> int:
        """Submits batch script `script` with sbatch `options`; returns the job's id.

        Raises:
          NoHosts: sbatch refused it (its words).
        """
        result = self.command("sbatch", "--parsable", *options, script)
        if result.returncode != 0:
            raise NoHosts(f"sbatch refused {script}: {result.stderr.strip()}")
        return int(result.stdout.strip().split(";")[0])

    def show(self, job_id: int) -> dict[str, str]:
        """The job's fields as `scontrol show job` says them ({"JobState": "PENDING", ...})."""
        words = self.command("scontrol", "show", "job", "--oneliner", str(job_id)).stdout.split()
        return {w.partition("=")[0]: w.partition("=")[2] for w in words if "=" in w}

    def state(self, job_id: int) -> str:
        """The job's state as scontrol says it (PENDING, RUNNING, COMPLETED, FAILED, ...), or
        LAUNCH_FAILED for a job Slurm could not start on its nodes (it would requeue it)."""
        said = self.show(job_id)
        if "launch_failed" in said.get("Reason", "").lower():
            return "LAUNCH_FAILED"
        return said.get("JobState", "UNKNOWN")

    @property
    def version(self) -> str:
        """slurmd's own words for its version, e.g. "slurm-wlm 22.05.8"."""
        return subprocess.run(
            ["slurmd", "-V"], capture_output=True, text=True, timeout=_COMMAND_S, check=False
        ).stdout.strip()

    def exit_code(self, job_id: int) -> int:
        """The batch script's exit code as scontrol says it (ExitCode=CODE:SIGNAL): the code,
        or 128 + the signal that ended it."""
        code, _, signum = self.show(job_id).get("ExitCode", "1:0").partition(":")
        return 128 + int(signum) if signum not in ("", "0") else int(code)

    def wait(
        self, job_id: int, timeout_s: float, checkpoint: Callable[[], None] | None = None
    ) -> str:
        """Waits until the job ended (at most `timeout_s`); returns its final state, or the
        state it is still in then."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.state(job_id)
            if state in DONE_STATES or time.monotonic() > deadline:
                return state
            if checkpoint:
                checkpoint()
            time.sleep(_POLL_S)

    def start_requeued(self, job_id: int, restarts: int, timeout_s: float) -> None:
        """Starts requeued job `job_id` now rather than when Slurm's hold on it ends (BeginTime,
        CredExpire + 1 s after the requeue: about two minutes), as docs/slurm.md says to: once it
        has been requeued `restarts` times and is PENDING (no longer COMPLETING: its nodes are
        done with the last run), and `REQUEUE_SETTLE_S` later, so that the new launch's
        credential is stamped at a later second than the old one's revocation (else a node
        refuses it, "Job credential revoked", and the job fails for good).

        Raises:
          NoHosts: the job was not requeued and PENDING within `timeout_s` (its fields named).
        """
        deadline = time.monotonic() + timeout_s
        while (said := self.show(job_id)).get("JobState") != "PENDING" or int(
            said.get("Restarts", "0")
        ) < restarts:
            if time.monotonic() > deadline:
                raise NoHosts(f"job {job_id} was not requeued within {timeout_s:g} s: {said}")
            time.sleep(_POLL_S)
        time.sleep(REQUEUE_SETTLE_S)
        self.command("scontrol", "update", f"JobId={job_id}", "StartTime=now")

    def close(self) -> None:
        """Stops the daemons (SIGTERM, then SIGKILL after _STOP_S), removes the hosts and
        what still runs in them; later calls do nothing."""
        daemons, self._daemons = self._daemons, []
        for daemon in reversed(daemons):
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
        for daemon in reversed(daemons):
            try:
                daemon.wait(timeout=_STOP_S)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        if self._hosts is not None:
            self._hosts.close()
            self._hosts = None
        shutil.rmtree(self.sockets, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
