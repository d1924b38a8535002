"""Tests for strategies.cluster (TF_CONFIG parsing and validation, with strategies.addresses)
and strategies.local_cluster (building)."""

import dataclasses
import doctest
import json
import os
import re
import subprocess
import sys
from unittest import mock

import pytest
from absl.testing import absltest
from absl.testing import parameterized

from tfdist.strategies import cluster
from tfdist.strategies.cluster import ClusterConfig
from tfdist.strategies.cluster import ClusterConfigError
from tfdist.strategies.cluster import Task
from tfdist.strategies.cluster import TaskType
from tfdist.strategies.cluster import from_environment
from tfdist.strategies.cluster import parse_tf_config
from tfdist.strategies.local_cluster import make_cluster

_WORKER0 = {"type": "worker", "index": 0}
_TWO_WORKERS = {"worker": ["host-a:2222", "host-b:2222"]}


def _tf_config(cluster_spec, task=None, **extra):
    """Returns a TF_CONFIG dict; the task defaults to worker 0."""
    return {"cluster": cluster_spec, "task": _WORKER0 if task is None else task, **extra}


class RejectTest(parameterized.TestCase):
    """Every invalid TF_CONFIG raises one line naming the field path and the value."""

    @parameterized.named_parameters(
        ("not_json", "{cluster: 1}", "", r'"\{cluster: 1\}" is not valid JSON \(.* at char 1\)'),
        ("json_array", "[1, 2]", "", r"\[1, 2\] is not a JSON object"),
        ("json_string", '"worker"', "", r'"worker" is not a JSON object'),
        ("python_list", ["worker"], "", r'\["worker"\] is not a JSON object'),
        ("cluster_missing", {"task": _WORKER0}, "cluster", "missing"),
        ("cluster_not_object", _tf_config(["a:1"]), "cluster", r'\["a:1"\] is not an object'),
        ("cluster_empty", _tf_config({}), "cluster", r"\{\} has no addresses"),
        (
            "cluster_all_jobs_empty",
            _tf_config({"worker": [], "ps": []}),
            "cluster",
            r'\{"worker": \[\], "ps": \[\]\} has no addresses',
        ),
        (
            "job_unknown",
            _tf_config({"worker": ["a:1"], "trainer": ["b:1"]}),
            "cluster",
            r'job "trainer" is unknown',
        ),
        ("job_not_list", _tf_config({"worker": "a:1"}), "cluster.worker", r'"a:1" is not a list'),
        (
            "address_not_string",
            _tf_config({"worker": ["a:1", 2222]}),
            r"cluster.worker[1]",
            "2222 is not a string",
        ),
        ("task_missing", {"cluster": _TWO_WORKERS}, "task", "missing"),
        (
            "task_not_object",
            _tf_config(_TWO_WORKERS, "worker"),
            "task",
            r'"worker" is not an object',
        ),
        ("task_type_missing", _tf_config(_TWO_WORKERS, {"index": 0}), "task.type", "missing"),
        (
            "task_type_unknown",
            _tf_config(_TWO_WORKERS, {"type": "boss", "index": 0}),
            "task.type",
            r'"boss" is not a task type',
        ),
        (
            "task_type_not_string",
            _tf_config(_TWO_WORKERS, {"type": 1, "index": 0}),
            "task.type",
            "1 is not a task type",
        ),
        (
            "task_type_not_in_cluster",
            _tf_config(_TWO_WORKERS, {"type": "ps", "index": 0}),
            "task.type",
            r'"ps" is not a job of the cluster \(it has worker\)',
        ),
        (
            "chief_not_in_cluster",
            _tf_config(_TWO_WORKERS, {"type": "master", "index": 0}),
            "task.type",
            r'"master" is not a job of the cluster',
        ),
        (
            "task_index_missing",
            _tf_config(_TWO_WORKERS, {"type": "worker"}),
            "task.index",
            "missing",
        ),
        (
            "task_index_string",
            _tf_config(_TWO_WORKERS, {"type": "worker", "index": "1"}),
            "task.index",
            r'"1" is not an integer',
        ),
        (
            "task_index_float",
            _tf_config(_TWO_WORKERS, {"type": "worker", "index": 1.0}),
            "task.index",
            r"1\.0 is not an integer",
        ),
        (
            "task_index_bool",
            _tf_config(_TWO_WORKERS, {"type": "worker", "index": True}),
            "task.index",
            "true is not an integer",
        ),
        (
            "task_index_negative",
            _tf_config(_TWO_WORKERS, {"type": "worker", "index": -1}),
            "task.index",
            r"-1 is out of range for cluster\.worker \(2 addresses\)",
        ),
        (
            "task_index_too_big",
            _tf_config(_TWO_WORKERS, {"type": "worker", "index": 2}),
            "task.index",
            r"2 is out of range for cluster\.worker .*from 0 to 1",
        ),
        (
            "unlisted_evaluator_index",
            _tf_config(_TWO_WORKERS, {"type": "evaluator", "index": 1}),
            "task.index",
            "1 is out of range for an evaluator not listed in cluster; use index 0",
        ),
        (
            "two_chiefs",
            _tf_config({"chief": ["a:1", "b:1"], "worker": ["c:1"]}),
            "cluster.chief",
            r'\["a:1", "b:1"\] has 2 chiefs',
        ),
        (
            "chief_and_master",
            _tf_config({"chief": ["a:1"], "master": ["b:1"]}),
            "cluster.chief",
            r'\["a:1", "b:1"\] has 2 chiefs',
        ),
        (
            "no_port",
            _tf_config({"worker": ["a:1", "localhost"]}),
            "cluster.worker[1]",
            r'"localhost" is not host:port; write addresses as "host:port"',
        ),
        (
            "port_not_integer",
            _tf_config({"worker": ["localhost:http"]}),
            "cluster.worker[0]",
            r'"localhost:http" has port "http"',
        ),
        (
            "port_empty",
            _tf_config({"worker": ["localhost:"]}),
            "cluster.worker[0]",
            r'"localhost:" has port ""',
        ),
        (
            "port_zero",
            _tf_config({"worker": ["localhost:0"]}),
            "cluster.worker[0]",
            r'"localhost:0" has port "0".*1 to 65535',
        ),
        (
            "port_too_big",
            _tf_config({"chief": ["c:1"], "ps": ["localhost:65536"]}),
            "cluster.ps[0]",
            r'"localhost:65536" has port "65536"',
        ),
        (
            "host_empty",
            _tf_config({"worker": [":2222"]}),
            "cluster.worker[0]",
            r'":2222" has an empty host',
        ),
        (
            "host_invalid",
            _tf_config({"worker": ["my host:2222"]}),
            "cluster.worker[0]",
            r'"my host:2222" has an invalid host "my host"',
        ),
        (
            "host_with_scheme",
            _tf_config({"worker": ["grpc://a:2222"]}),
            "cluster.worker[0]",
            r'"grpc://a:2222" has an invalid host "grpc://a"',
        ),
        (
            "ipv6_unbracketed",
            _tf_config({"worker": ["::1:2222"]}),
            "cluster.worker[0]",
            r'"::1:2222" has an IPv6 host without brackets; .* "\[::1\]:2222"',
        ),
        (
            "ipv6_bad_brackets",
            _tf_config({"worker": ["[zz::1]:2222"]}),
            "cluster.worker[0]",
            r'"\[zz::1\]:2222" has an invalid host',
        ),
        (
            "duplicate_in_job",
            _tf_config({"worker": ["a:1", "a:1"]}),
            "cluster.worker[1]",
            r'"a:1" is also used by cluster\.worker\[0\]',
        ),
        (
            "duplicate_across_jobs",
            _tf_config({"master": ["a:1"], "worker": ["a:1"]}),
            "cluster.worker[0]",
            r'"a:1" is also used by cluster\.master\[0\]',
        ),
        (
            "localhost_and_loopback_ip",
            _tf_config({"worker": ["localhost:2222", "127.0.0.1:2222"]}),
            "cluster.worker[1]",
            r'"127.0.0.1:2222" is also used by cluster\.worker\[0\] '
            r'\("localhost:2222"; both name this machine',
        ),
        (
            "ipv6_loopback_and_short_ipv4",
            _tf_config({"chief": ["[::1]:7"], "worker": ["127.1:7"]}),
            "cluster.worker[0]",
            r'"127.1:7" is also used by cluster\.chief\[0\]',
        ),
        (
            "other_loopback_ip",
            _tf_config({"worker": ["127.0.0.1:7", "127.0.0.2:7"]}),
            "cluster.worker[1]",
            r'"127.0.0.2:7" is also used by cluster\.worker\[0\]',
        ),
        (
            "port_with_leading_zero",
            _tf_config({"worker": ["h:2222", "h:02222"]}),
            "cluster.worker[1]",
            r'"h:02222" is also used by .*spelled differently',
        ),
        (
            "host_case_and_final_dot",
            _tf_config({"worker": ["Host.Example:1", "host.example.:1"]}),
            "cluster.worker[1]",
            r'"host.example.:1" is also used by cluster\.worker\[0\]',
        ),
        (
            "two_evaluators",
            _tf_config({"worker": ["w:1"], "evaluator": ["e:1", "e:2"]}),
            "cluster.evaluator",
            r'\["e:1", "e:2"\] has 2 evaluators; keep one',
        ),
        (
            "ps_without_chief",
            _tf_config({"worker": ["w:1"], "ps": ["p:1"]}),
            "cluster",
            r"has 1 ps task\(s\) but no chief, which coordinates ParameterServerStrategy "
            r'\(workers and ps tasks only serve it\); add a "chief" job',
        ),
        (
            "rpc_layer_not_string",
            _tf_config(_TWO_WORKERS, rpc_layer=5),
            "rpc_layer",
            "5 is not a string",
        ),
        (
            "value_truncated",
            _tf_config({"worker": "x" * 500}),
            "cluster.worker",
            r'"xxx+ \.\.\. is not a list',
        ),
    )
    def test_rejects(self, value, path, detail):
        prefix = f"TF_CONFIG {path}" if path else "TF_CONFIG"
        forms = [value, json.dumps(value)] if isinstance(value, dict) else [value]
        for form in forms:
            with self.subTest(form=type(form).__name__):
                with self.assertRaisesRegex(
                    ClusterConfigError, f"^{re.escape(prefix)}: {detail}"
                ) as raised:
                    parse_tf_config(form)
                message = str(raised.exception)
                self.assertNotIn("\n", message)
                self.assertLess(len(message), 400)
                self.assertTrue(message.endswith("."), message)

    def test_error_is_a_value_error(self):
        self.assertTrue(issubclass(ClusterConfigError, ValueError))

    def test_unprintable_value_stays_on_one_line(self):
        class Weird:
            def __repr__(self):
                return "line one\nline two"

        with self.assertRaisesRegex(
            ClusterConfigError, r"^TF_CONFIG: line one\\nline two"
        ) as raised:
            parse_tf_config(Weird())
        self.assertNotIn("\n", str(raised.exception))


class AcceptTest(parameterized.TestCase):
    """Valid TF_CONFIG forms parse."""

    @parameterized.named_parameters(
        ("ipv4", "10.0.0.1:2222"),
        ("localhost", "localhost:2222"),
        ("host_name", "worker-0.trainer.svc.cluster.local:2222"),
        ("ipv6_loopback", "[::1]:2222"),
        ("ipv6_link_local", "[fe80::1]:2222"),
        ("ipv6_mapped_ipv4", "[::ffff:10.0.0.1]:2222"),
        ("max_port", "localhost:65535"),
        ("min_port", "localhost:1"),
    )
    def test_address_forms(self, address):
        config = parse_tf_config(_tf_config({"worker": [address]}))
        self.assertEqual(config.task_address, address)

    def test_json_text_and_dict_agree(self):
        value = _tf_config(_TWO_WORKERS, {"type": "worker", "index": 1})
        self.assertEqual(parse_tf_config(json.dumps(value)), parse_tf_config(value))

    def test_fields(self):
        config = parse_tf_config(
            json.dumps(
                _tf_config(
                    {"ps": ["p:1"], "worker": ["w:1", "w:2"], "chief": ["c:1"]},
                    {"type": "ps", "index": 0},
                )
            )
        )
        self.assertEqual(
            dict(config.jobs), {"chief": ("c:1",), "worker": ("w:1", "w:2"), "ps": ("p:1",)}
        )
        self.assertEqual(list(config.jobs), ["chief", "worker", "ps"])
        self.assertEqual(config.task, Task(TaskType.PS, 0))
        self.assertIs(config.task.type, TaskType.PS)
        self.assertEqual(config.rpc_layer, "grpc")

    def test_extra_keys_are_ignored(self):
        config = parse_tf_config(_tf_config(_TWO_WORKERS, environment="cloud", other={"x": 1}))
        self.assertEqual(config.to_dict()["cluster"], {"worker": ["host-a:2222", "host-b:2222"]})
        self.assertNotIn("environment", config.to_dict())

    def test_rpc_layer(self):
        config = parse_tf_config(_tf_config(_TWO_WORKERS, rpc_layer="grpc+loas"))
        self.assertEqual(config.rpc_layer, "grpc+loas")

    def test_master_is_chief(self):
        config = parse_tf_config(
            _tf_config({"master": ["m:1"], "worker": ["w:1"]}, {"type": "master", "index": 0})
        )
        self.assertEqual(dict(config.jobs), {"chief": ("m:1",), "worker": ("w:1",)})
        self.assertIs(config.task.type, TaskType.CHIEF)
        self.assertEqual(config.to_dict()["cluster"], {"chief": ["m:1"], "worker": ["w:1"]})
        self.assertEqual(config.to_dict()["task"], {"type": "chief", "index": 0})

    def test_empty_jobs_are_dropped(self):
        config = parse_tf_config(_tf_config({"chief": [], "worker": ["w:1"], "ps": []}))
        self.assertEqual(dict(config.jobs), {"worker": ("w:1",)})

    def test_tuples_in_a_mapping(self):
        config = parse_tf_config(
            {"cluster": {"worker": ("w:1",)}, "task": {"type": TaskType.WORKER, "index": 0}}
        )
        self.assertEqual(config.task_address, "w:1")


class ClusterConfigTest(absltest.TestCase):
    """Properties, immutability, equality and serialisation."""

    def test_workers_without_chief(self):
        config = parse_tf_config(_tf_config(_TWO_WORKERS))
        self.assertEqual(config.num_workers, 2)
        self.assertEqual(config.num_ps, 0)
        self.assertFalse(config.has_chief)
        self.assertTrue(config.is_chief)
        self.assertFalse(config.for_task("worker", 1).is_chief)

    def test_with_chief(self):
        config = parse_tf_config(
            _tf_config(
                {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1", "p:2"]},
                {"type": "chief", "index": 0},
            )
        )
        self.assertEqual(config.num_workers, 3)
        self.assertEqual(config.num_ps, 2)
        self.assertTrue(config.has_chief)
        self.assertTrue(config.is_chief)
        self.assertEqual(config.task_address, "c:1")
        self.assertFalse(config.for_task("worker", 0).is_chief)
        self.assertFalse(config.for_task("ps", 0).is_chief)
        self.assertEqual(config.for_task("ps", 1).task_address, "p:2")

    def test_evaluator_not_listed(self):
        config = parse_tf_config(_tf_config(_TWO_WORKERS, {"type": "evaluator", "index": 0}))
        self.assertIs(config.task.type, TaskType.EVALUATOR)
        self.assertIsNone(config.task_address)
        self.assertFalse(config.is_chief)
        self.assertEqual(config.num_workers, 2)

    def test_evaluator_listed(self):
        config = parse_tf_config(
            _tf_config({"worker": ["w:1"], "evaluator": ["e:1"]}, {"type": "evaluator", "index": 0})
        )
        self.assertEqual(config.task_address, "e:1")
        self.assertEqual(config.num_workers, 1)

    def test_is_immutable(self):
        config = parse_tf_config(_tf_config(_TWO_WORKERS))
        with self.assertRaises(dataclasses.FrozenInstanceError):
            config.rpc_layer = "other"  # pytype: disable=not-writable
        with self.assertRaises(TypeError):
            config.jobs["ps"] = ("p:1",)  # pytype: disable=unsupported-operands
        self.assertIsInstance(config.jobs["worker"], tuple)

    def test_constructor_freezes_jobs(self):
        jobs = {"worker": ["w:1"]}
        config = ClusterConfig(jobs=jobs, task=Task(TaskType.WORKER, 0))
        jobs["worker"].append("w:2")
        self.assertEqual(dict(config.jobs), {"worker": ("w:1",)})

    def test_equality_and_hash(self):
        first = parse_tf_config(_tf_config({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]}))
        second = parse_tf_config(_tf_config({"ps": ["p:1"], "worker": ["w:1"], "chief": ["c:1"]}))
        self.assertEqual(first, second)
        self.assertEqual(hash(first), hash(second))
        self.assertLen({first, second}, 1)
        self.assertNotEqual(first, first.for_task("ps", 0))
        self.assertNotEqual(first, dataclasses.replace(first, rpc_layer="grpc+loas"))

    def test_round_trip(self):
        for value in (
            _tf_config(
                {"master": ["m:1"], "worker": ["[::1]:2"], "ps": ["p:3"], "evaluator": ["e:4"]},
                {"type": "ps", "index": 0},
            ),
            _tf_config(_TWO_WORKERS, {"type": "evaluator", "index": 0}, rpc_layer="x"),
        ):
            config = parse_tf_config(value)
            with self.subTest(config=config):
                self.assertEqual(parse_tf_config(config.to_json()), config)
                self.assertEqual(parse_tf_config(config.to_dict()), config)
                self.assertEqual(json.loads(config.to_json()), config.to_dict())

    def test_to_dict_shape(self):
        config = parse_tf_config(
            _tf_config({"ps": ["p:1"], "chief": ["c:1"]}, {"type": "ps", "index": 0})
        )
        self.assertEqual(
            config.to_dict(),
            {
                "cluster": {"chief": ["c:1"], "ps": ["p:1"]},
                "task": {"type": "ps", "index": 0},
                "rpc_layer": "grpc",
            },
        )

    def test_for_task(self):
        config = parse_tf_config(_tf_config({"chief": ["c:1"], "worker": ["w:1", "w:2"]}))
        other = config.for_task(TaskType.WORKER, 1)
        self.assertEqual(other.task, Task(TaskType.WORKER, 1))
        self.assertEqual(other.jobs, config.jobs)
        self.assertEqual(config.task, Task(TaskType.WORKER, 0))
        self.assertEqual(config.for_task("master", 0).task, Task(TaskType.CHIEF, 0))
        self.assertIsNone(config.for_task("evaluator", 0).task_address)

    def test_for_task_validates(self):
        config = parse_tf_config(_tf_config(_TWO_WORKERS))
        with self.assertRaisesRegex(ClusterConfigError, r"^TF_CONFIG task\.index: 2 is out"):
            config.for_task("worker", 2)
        with self.assertRaisesRegex(ClusterConfigError, r'^TF_CONFIG task\.type: "ps" is not'):
            config.for_task("ps", 0)


class FromEnvironmentTest(absltest.TestCase):
    """from_environment reads TF_CONFIG only."""

    def test_unset_or_blank_is_none(self):
        for environ in ({}, {"TF_CONFIG": ""}, {"TF_CONFIG": " \n\t"}, {"OTHER": "1"}):
            with self.subTest(environ=environ):
                self.assertIsNone(from_environment(environ))

    def test_valid(self):
        value = _tf_config(_TWO_WORKERS, {"type": "worker", "index": 1})
        config = from_environment({"TF_CONFIG": json.dumps(value)})
        self.assertEqual(config, parse_tf_config(value))

    def test_invalid_raises(self):
        with self.assertRaisesRegex(ClusterConfigError, r"^TF_CONFIG cluster: \{\} has no"):
            from_environment({"TF_CONFIG": '{"cluster": {}}'})

    def test_defaults_to_os_environ(self):
        value = json.dumps(_tf_config(_TWO_WORKERS))
        with mock.patch.dict(os.environ, {"TF_CONFIG": value}):
            self.assertEqual(from_environment(), parse_tf_config(value))
        with mock.patch.dict(os.environ, clear=True):
            self.assertIsNone(from_environment())


class MakeClusterTest(absltest.TestCase):
    """make_cluster builds validated local clusters."""

    def test_workers_only(self):
        config = make_cluster(num_workers=2, ports=[2000, 2001])
        self.assertEqual(dict(config.jobs), {"worker": ("127.0.0.1:2000", "127.0.0.1:2001")})
        self.assertEqual(config.task, Task(TaskType.WORKER, 0))
        self.assertTrue(config.is_chief)

    def test_all_jobs_in_port_order(self):
        config = make_cluster(
            num_workers=2,
            num_ps=1,
            chief=True,
            evaluator=True,
            ports=[1, 2, 3, 4, 5],
            host="localhost",
        )
        self.assertEqual(
            config.to_dict()["cluster"],
            {
                "chief": ["localhost:1"],
                "worker": ["localhost:2", "localhost:3"],
                "ps": ["localhost:4"],
                "evaluator": ["localhost:5"],
            },
        )
        self.assertEqual(config.task, Task(TaskType.CHIEF, 0))
        self.assertEqual(config.num_workers, 3)

    def test_task(self):
        config = make_cluster(
            num_workers=1, num_ps=2, chief=True, ports=[1, 2, 3, 4], task=("ps", 1)
        )
        self.assertEqual(config.task_address, "127.0.0.1:4")

    def test_ipv6_host_is_bracketed(self):
        config = make_cluster(num_workers=1, ports=[2222], host="::1")
        self.assertEqual(config.task_address, "[::1]:2222")

    def test_port_count_mismatch(self):
        with self.assertRaisesRegex(
            ValueError, r"got 2 ports for 3 tasks \(chief=1, worker=2, ps=0, evaluator=0\)"
        ):
            make_cluster(num_workers=2, chief=True, ports=[1, 2])

    def test_bad_counts(self):
        for kwargs in (
            {"num_workers": 0, "ports": []},
            {"num_workers": 1, "num_ps": -1, "ports": [1]},
        ):
            with self.subTest(**kwargs):
                with self.assertRaisesRegex(ValueError, r"num_workers >= 1 and num_ps >= 0"):
                    make_cluster(**kwargs)

    def test_invalid_cluster(self):
        with self.assertRaisesRegex(ClusterConfigError, r"cluster\.worker\[1\]: .* is also used"):
            make_cluster(num_workers=2, ports=[2222, 2222])
        with self.assertRaisesRegex(ClusterConfigError, r'cluster\.worker\[0\]: .* has port "0"'):
            make_cluster(num_workers=1, ports=[0])
        with self.assertRaisesRegex(ClusterConfigError, r"^TF_CONFIG task\.type: \"ps\""):
            make_cluster(num_workers=1, ports=[1], task=("ps", 0))


class ModuleTest(absltest.TestCase):
    """The module stays importable without TensorFlow."""

    @pytest.mark.multiprocess
    def test_does_not_import_tensorflow(self):
        # Imported in a bare `strategies` package whose __init__ does not run, so the test does
        # not depend on what the package imports: only cluster and the modules it imports load.
        code = (
            "import sys, types\n"
            "package = types.ModuleType('strategies')\n"
            f"package.__path__ = [{os.path.dirname(cluster.__file__)!r}]\n"
            "sys.modules['strategies'] = package\n"
            "import strategies.cluster\n"
            "assert not any(name.split('.')[0] == 'tensorflow' for name in sys.modules)\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

    def test_docstring_example(self):
        results = doctest.testmod(cluster)
        self.assertGreater(results.attempted, 0)
        self.assertEqual(results.failed, 0)


if __name__ == "__main__":
    absltest.main()
