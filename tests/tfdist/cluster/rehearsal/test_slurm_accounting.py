"""Tests for tfdist.cluster.rehearsal.slurm_accounting's configuration (the daemons themselves,
on real Slurm, run in test_slurm_cluster.py)."""

from unittest import mock

from absl.testing import absltest

from tfdist.cluster.rehearsal import slurm_accounting
from tfdist.cluster.rehearsal.hosts import NoHosts


class SlurmAccountingTest(absltest.TestCase):
    def test_a_machine_without_it_is_told_how_to_install_it_in_one_line(self):
        with mock.patch("shutil.which", lambda name: None if name == "slurmdbd" else name):
            self.assertEqual(slurm_accounting.missing(), "slurmdbd")
            with self.assertRaisesRegex(NoHosts, r"lacks; install .*\(apt-get install slurmdbd"):
                slurm_accounting.require()

    def test_slurmctld_sends_its_records_to_the_slurmdbd_on_the_controller(self):
        self.assertEqual(
            slurm_accounting.slurm_conf_lines("10.250.0.2", "/tmp/s/munge.socket"),
            [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=10.250.0.2",
                "AccountingStoragePort=6819",
                "AccountingStoragePass=/tmp/s/munge.socket",  # Its munged, not the system's.
            ],
        )

    def test_slurmdbd_stores_in_the_clusters_own_database_and_directory(self):
        conf = slurm_accounting.slurmdbd_conf("/scratch/slurm", "/tmp/s/munge.socket")
        self.assertIn("AuthInfo=socket=/tmp/s/munge.socket\n", conf)
        self.assertIn("StorageHost=localhost\n", conf)  # MariaDB's socket, not a network.
        self.assertIn("LogFile=/scratch/slurm/slurmdbd.log\n", conf)


if __name__ == "__main__":
    absltest.main()
