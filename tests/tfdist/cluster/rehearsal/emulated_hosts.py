"""For tests that emulate hosts: skip where this machine cannot (or has no Slurm), and the
namespaces a rehearsal holds."""

import os
import subprocess

import pytest

from tfdist.cluster.rehearsal import hosts as hosts_lib
from tfdist.cluster.rehearsal import slurm_accounting
from tfdist.cluster.rehearsal import slurm_cluster


def emulated_hosts_or_skip() -> None:
    """Skips the calling test unless this machine can emulate hosts."""
    try:
        hosts_lib.Hosts([("probe",)]).close()
    except hosts_lib.NoHosts as refused:
        pytest.skip(f"this machine cannot emulate hosts: {refused}")


def real_slurm_or_skip() -> None:
    """Skips the calling test unless this machine can run a real Slurm cluster; under
    TFDIST_REQUIRE_SLURM=1 (CI, which installs Slurm) a missing Slurm fails it instead."""
    absent = slurm_cluster.missing()
    if absent and os.environ.get("TFDIST_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm is required here but {absent} is missing: {slurm_cluster.INSTALL}")
    if absent:
        pytest.skip(f"Slurm is not installed ({absent}): {slurm_cluster.INSTALL}")
    emulated_hosts_or_skip()


def slurm_accounting_or_skip() -> None:
    """Skips the calling test unless this machine can keep a real Slurm cluster's accounting
    (slurmdbd, MariaDB); under TFDIST_REQUIRE_SLURM=1 their absence fails it instead."""
    absent = slurm_accounting.missing()
    if absent and os.environ.get("TFDIST_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm's accounting is required here but {absent} is missing")
    if absent:
        pytest.skip(f"Slurm's accounting is not installed ({absent}): {slurm_accounting.INSTALL}")


def our_namespaces(owner: int) -> list[str]:
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    prefix = f"{hosts_lib.PREFIX}{owner}-"
    names = [line.split()[0] for line in listed.splitlines() if line.startswith(prefix)]
    if os.path.isdir(hosts_lib.NETNS_DIR):
        names += [name for name in os.listdir(hosts_lib.NETNS_DIR) if name.startswith(prefix)]
    return names
