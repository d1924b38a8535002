"""tfdist.strategies.selection: what auto picks from the cluster and the local devices, and the
explicit choices a cluster cannot run."""

from absl.testing import absltest
from absl.testing import parameterized

from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyConfigError
from tfdist.strategies import StrategyKind
from tfdist.strategies import make_cluster
from tfdist.strategies.selection import resolve_kind

_PS_CLUSTER = make_cluster(num_workers=1, num_ps=1, chief=True, ports=[2001, 2002, 2003])
_TWO_WORKERS = make_cluster(num_workers=2, ports=[2001, 2002])


class ResolveKindTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("single_device", None, 1, StrategyKind.ONE_DEVICE),
        ("several_devices", None, 2, StrategyKind.MIRRORED),
        ("several_workers", _TWO_WORKERS, 1, StrategyKind.MULTI_WORKER_MIRRORED),
        ("ps_tasks", _PS_CLUSTER, 1, StrategyKind.PARAMETER_SERVER),
    )
    def test_auto_picks(self, cluster, num_devices, expected):
        self.assertIs(resolve_kind(StrategyKind.AUTO, cluster, num_devices), expected)

    @parameterized.named_parameters(
        ("ps_without_ps", StrategyKind.PARAMETER_SERVER, None, r"parameter_server needs ps tasks"),
        ("ps_on_workers", StrategyKind.PARAMETER_SERVER, _TWO_WORKERS, r"has none"),
        (
            "mwms_with_ps",
            StrategyKind.MULTI_WORKER_MIRRORED,
            _PS_CLUSTER,
            r"multi_worker_mirrored cannot use the cluster's 1 ps",
        ),
        (
            "mirrored_on_cluster",
            StrategyKind.MIRRORED,
            _TWO_WORKERS,
            r"mirrored trains in one process.*2 worker",
        ),
        ("one_device_on_ps", StrategyKind.ONE_DEVICE, _PS_CLUSTER, r"one_device trains in one"),
    )
    def test_rejects(self, kind, cluster, message):
        with self.assertRaisesRegex(StrategyConfigError, message):
            resolve_kind(kind, cluster, 1)

    def test_explicit_choice_that_fits_is_kept(self):
        self.assertIs(
            resolve_kind(StrategyKind.MULTI_WORKER_MIRRORED, None, 1),
            StrategyKind.MULTI_WORKER_MIRRORED,
        )

    @parameterized.named_parameters(
        ("one_local_device", 1, StrategyKind.ONE_DEVICE),
        ("two_local_devices", 2, StrategyKind.MIRRORED),
    )
    def test_a_default_config_leaves_the_choice_to_auto(self, num_devices, expected):
        config = StrategyConfig()
        picked = resolve_kind(config.strategy, None, num_devices)
        self.assertIs(picked, expected)
        self.assertEqual(config.ignored_by(picked), [])  # No option set that it cannot use.


if __name__ == "__main__":
    absltest.main()
