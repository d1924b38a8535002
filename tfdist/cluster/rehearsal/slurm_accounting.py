"""Slurm's job accounting for the real Slurm cluster (`slurm_cluster.SlurmCluster(accounting=
True)`): slurmdbd over a MariaDB server of the cluster's own, so that `sacct` says what happened
to a job, one record per run (REQUEUED, PREEMPTED, COMPLETED, ...).

The server is Debian's mariadbd, run afresh for each cluster: its data, logs and pid file in
the cluster's directory, its socket in the cluster's short socket directory, no network
(`--skip-networking`) and no option file read (`--no-defaults`); slurmdbd reaches it through
that socket (`MYSQL_UNIX_PORT`) and creates its tables on its first start. Nothing system-wide
is started or used: not the mariadb service that installing mariadb-server sets up, nor its
/var/lib/mysql. Linux, root.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from tfdist.cluster.rehearsal.hosts import NoHosts

PROGRAMS = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct")
INSTALL = "apt-get install slurmdbd mariadb-server"
DBD_PORT = 6819
DATABASE = "slurm_acct_db"
_INSTALL_S = 60.0


def missing() -> str | None:
    """What this machine lacks to keep a Slurm cluster's accounting, else None."""
    absent = [name for name in PROGRAMS if shutil.which(name) is None]
    return ", ".join(absent) if absent else None


def require() -> None:
    """Raises NoHosts, in one line that says how to install it, unless accounting can run."""
    absent = missing()
    if absent:
        raise NoHosts(
            f"Slurm's accounting needs {absent}, which this machine lacks; install Debian's "
            f"slurmdbd and mariadb-server ({INSTALL}) as root."
        )


def database_argv(directory: str, socket: str) -> list[str]:
    """Creates an empty MariaDB data directory in `directory` and returns the argv of the
    server that serves it on Unix socket `socket` only, as root.

    Raises:
      NoHosts: mariadb-install-db failed (its log is named).
    """
    data = os.path.join(directory, "mariadb")
    log = os.path.join(directory, "mariadb-install-db.log")
    server = [
        "--no-defaults",
        "--user=root",
        f"--datadir={data}",
        "--skip-log-bin",
        "--innodb-buffer-pool-size=32M",
        "--innodb-log-file-size=8M",
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
    ]
    with open(log, "wb") as output:
        installed = subprocess.run(
            ["mariadb-install-db", *server, "--auth-root-authentication-method=socket"],
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=_INSTALL_S,
            check=False,
        )
    if installed.returncode != 0:
        raise NoHosts(f"mariadb-install-db failed for Slurm's accounting; read {log}.")
    return [
        "mariadbd",
        *server,
        "--skip-networking",
        f"--socket={socket}",
        f"--pid-file={os.path.join(directory, 'mariadbd.pid')}",
        f"--log-error={os.path.join(directory, 'mariadbd.log')}",
    ]


def slurmdbd_conf(directory: str, munge_socket: str) -> str:
    """slurmdbd.conf for a slurmdbd as root on the controller, storing in `DATABASE` as the
    database's root (by its socket); slurmdbd refuses it unless only its owner can read it."""
    lines = [
        "AuthType=auth/munge",
        f"AuthInfo=socket={munge_socket}",
        "DbdHost=localhost",
        f"DbdPort={DBD_PORT}",
        "SlurmUser=root",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StorageUser=root",
        f"StorageLoc={DATABASE}",
        f"PidFile={directory}/slurmdbd.pid",
        f"LogFile={directory}/slurmdbd.log",
    ]
    return "\n".join(lines) + "\n"


def slurm_conf_lines(controller_address: str, munge_socket: str) -> list[str]:
    """slurm.conf's lines that send every job's record to the slurmdbd at
    `controller_address`, authenticated by the munged at `munge_socket` (slurmctld and sacct
    reach slurmdbd with AccountingStoragePass's munged, not AuthInfo's)."""
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={controller_address}",
        f"AccountingStoragePort={DBD_PORT}",
        f"AccountingStoragePass={munge_socket}",
    ]
