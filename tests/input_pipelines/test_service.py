"""tf.data service: dispatcher addresses, cluster options, and exactly-once reading through an
in-process dispatcher with 2 workers on 127.0.0.1.

Reads run in a thread with a deadline, so that a stuck service fails a test instead of hanging it.
"""

import collections
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from unittest import mock

from absl.testing import parameterized
import portpicker
import pytest
import tensorflow as tf

from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import ReadOptions
from tfdist.input_pipelines import dispatcher
from tfdist.input_pipelines import image_batches
from tfdist.input_pipelines import pipeline
from tfdist.input_pipelines import service
from tfdist.input_pipelines.choices import ServiceMode
from tfdist.input_pipelines.choices import parse_service_address
from tfdist.input_pipelines.messages import InputConfigError
from tests import ports
from tests.tf_test_case import TfTestCase

_NUM_FILES = 6
_NUM_IDS = 60
_NUM_WORKERS = 2
_EXAMPLES_PER_BATCH = 4
_READ_TIMEOUT_S = 30
_ADDRESS_ERROR = (
    r"not a dispatcher address; write grpc://host:port, "
    r"e\.g\. grpc://127\.0\.0\.1:5050\.$"
)


def _write_id_files(directory: str) -> list[str]:
    """Writes ids 0.._NUM_IDS-1 as tf.train.Examples, id i into file i % _NUM_FILES."""
    paths = [os.path.join(directory, f"ids-{index}.tfrecord") for index in range(_NUM_FILES)]
    for index, path in enumerate(paths):
        with tf.io.TFRecordWriter(path) as writer:
            for example_id in range(index, _NUM_IDS, _NUM_FILES):
                feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[example_id]))
                example = tf.train.Example(features=tf.train.Features(feature={"id": feature}))
                writer.write(example.SerializeToString())
    return paths


def _id_batches(paths: list[str], *, shuffle: bool = False) -> tf.data.Dataset:
    """Batches of example ids read from `paths` like a real pipeline: files interleaved in
    parallel, parsed, optionally shuffled (files and examples), batched."""
    dataset = tf.data.Dataset.from_tensor_slices(paths)
    if shuffle:
        dataset = dataset.shuffle(len(paths), seed=0)
    dataset = dataset.interleave(
        tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE
    )
    dataset = dataset.map(
        lambda record: tf.io.parse_single_example(
            record, {"id": tf.io.FixedLenFeature([], tf.int64)}
        )["id"]
    )
    if shuffle:
        dataset = dataset.shuffle(_NUM_IDS, seed=0)
    return dataset.batch(_EXAMPLES_PER_BATCH)


def _read_ids(*datasets: tf.data.Dataset) -> list[collections.Counter]:
    """Reads `datasets` to their ends, one batch from each in turn; returns the ids per dataset.

    Fails after _READ_TIMEOUT_S instead of hanging (the reading thread is a daemon).
    """
    counts = [collections.Counter() for _ in datasets]
    errors = []

    def read():
        try:
            iterators = dict(enumerate(iter(dataset) for dataset in datasets))
            while iterators:
                for index, iterator in list(iterators.items()):
                    batch = next(iterator, None)
                    if batch is None:
                        del iterators[index]
                    else:
                        counts[index].update(batch.numpy().tolist())
        except Exception as error:  # pylint: disable=broad-except
            errors.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(_READ_TIMEOUT_S)
    if thread.is_alive():
        raise AssertionError(f"reading through the tf.data service took over {_READ_TIMEOUT_S} s")
    if errors:
        raise errors[0]
    return counts


class ParseAddressTest(parameterized.TestCase):
    @parameterized.parameters(
        ("grpc://127.0.0.1:5050", ("grpc", "127.0.0.1:5050")),
        ("grpc://dispatcher-0.example.com:1", ("grpc", "dispatcher-0.example.com:1")),
        ("grpc://[::1]:65535", ("grpc", "[::1]:65535")),
    )
    def test_accepts(self, address, parts):
        self.assertEqual(parse_service_address(address), parts)

    @parameterized.named_parameters(
        ("host_only", "localhost"),
        ("no_protocol", "127.0.0.1:5050"),
        ("other_protocol", "http://127.0.0.1:5050"),
        ("upper_case_protocol", "GRPC://127.0.0.1:5050"),
        ("no_port", "grpc://127.0.0.1"),
        ("empty_port", "grpc://127.0.0.1:"),
        ("port_not_numeric", "grpc://127.0.0.1:http"),
        ("port_zero", "grpc://127.0.0.1:0"),
        ("port_too_large", "grpc://127.0.0.1:65536"),
        ("empty_host", "grpc://:5050"),
        ("path", "grpc://127.0.0.1:5050/dispatcher"),
        ("trailing_newline", "grpc://127.0.0.1:5050\n"),
        ("empty", ""),
        ("not_a_string", 5050),
    )
    def test_rejects(self, address):
        with self.assertRaisesRegex(
            InputConfigError, f"^tf_data_service={re.escape(repr(address))}: {_ADDRESS_ERROR}"
        ) as raised:
            parse_service_address(address)
        self.assertNotIn("\n", str(raised.exception))


class OptionsTest(parameterized.TestCase):
    """Rejections before any server starts."""

    @parameterized.named_parameters(
        ("port_zero", dict(port=0, num_workers=1), r"^port=0: not a TCP port; pass 1\.\.65535\.$"),
        ("port_too_large", dict(port=65536, num_workers=1), r"^port=65536: not a TCP port"),
        (
            "no_workers",
            dict(port=5050, num_workers=0),
            r"^num_workers=0: a service needs workers; pass 1 or more\.$",
        ),
        ("empty_host", dict(port=5050, num_workers=1, host=""), r"^host='': not a host name"),
        (
            "host_with_port",
            dict(port=5050, num_workers=1, host="127.0.0.1:5050"),
            r"^host='127\.0\.0\.1:5050': not a host name or IP; pass e\.g\. 127\.0\.0\.1\.$",
        ),
        (
            "too_few_worker_ports",
            dict(port=5050, num_workers=2, worker_ports=[5051]),
            r"^worker_ports=\[5051\]: 1 port\(s\) for num_workers=2; pass one port per worker "
            r"or None\.$",
        ),
        (
            "bad_worker_port",
            dict(port=5050, num_workers=2, worker_ports=[5051, 0]),
            r"^worker_ports\[1\]=0: not a TCP port",
        ),
    )
    def test_start_rejects(self, kwargs, message):
        with self.assertRaisesRegex(InputConfigError, message) as raised:
            service.start(**kwargs)
        self.assertNotIn("\n", str(raised.exception))

    def test_distribute_rejects_a_bad_address(self):
        with self.assertRaisesRegex(InputConfigError, "^tf_data_service='localhost': "):
            service.distribute(
                tf.data.Dataset.range(1),
                "localhost",
                ServiceMode.DISTRIBUTED_EPOCH,
                job_name="train",
            )

    def test_distribute_rejects_an_empty_job_name(self):
        with self.assertRaisesRegex(ValueError, "^job_name='': consumers share a job by name"):
            service.distribute(
                tf.data.Dataset.range(1),
                "grpc://127.0.0.1:5050",
                ServiceMode.DISTRIBUTED_EPOCH,
                job_name="",
            )


class CheckDispatcherTest(parameterized.TestCase):
    """`distribute` waits a bounded time for the dispatcher instead of hanging on nothing."""

    def test_answering_dispatcher_passes_at_once(self):
        server = self.enterContext(socket.create_server(("127.0.0.1", 0)))
        started = time.monotonic()
        dispatcher.check_dispatcher(f"grpc://127.0.0.1:{server.getsockname()[1]}", wait_s=10)
        self.assertLess(time.monotonic() - started, 5)

    def test_dispatcher_that_starts_late_is_found(self):
        port = portpicker.pick_unused_port()
        servers = []
        timer = threading.Timer(
            1.5, lambda: servers.append(socket.create_server(("127.0.0.1", port)))
        )
        timer.start()
        self.addCleanup(lambda: [server.close() for server in servers])
        self.addCleanup(timer.cancel)
        dispatcher.check_dispatcher(f"grpc://127.0.0.1:{port}", wait_s=30)
        self.assertLen(servers, 1)

    @parameterized.named_parameters(
        (
            "nothing_listens",
            lambda test: f"127.0.0.1:{ports.refusing_port(test)}",
            "connection refused",
        ),
        (
            "host_does_not_resolve",
            lambda test: "no-such-host.invalid:5050",
            "host 'no-such-host.invalid' does not resolve",
        ),
    )
    def test_nothing_there_is_a_one_line_error_within_the_bound(self, make_address, reason):
        address = f"grpc://{make_address(self)}"
        port = address.rpartition(":")[2]
        started = time.monotonic()
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^tf_data_service={re.escape(repr(address))}: no dispatcher answered there "
            rf"within 2 s \(last try: {re.escape(reason)}\); start one with `tfdist data "
            rf"serve --port={port}`, or fix the address\.$",
        ):
            dispatcher.check_dispatcher(address, wait_s=2)
        self.assertLess(time.monotonic() - started, 2 + 10)  # The bound, and slack for a busy box.

    def test_distribute_checks_the_dispatcher_before_building_anything(self):
        address = f"grpc://127.0.0.1:{ports.refusing_port(self)}"
        with (
            mock.patch.object(tf.data.experimental.service, "distribute") as tf_distribute,
            self.assertRaisesRegex(InputConfigError, "no dispatcher answered there"),
        ):
            service.distribute(
                tf.data.Dataset.range(1),
                address,
                ServiceMode.DISTRIBUTED_EPOCH,
                job_name="train",
                dispatcher_wait_s=0.5,
            )
        tf_distribute.assert_not_called()


class ServiceClusterTest(TfTestCase):
    """Starts and stops small clusters of its own."""

    def test_addresses(self):
        port, worker_ports = portpicker.pick_unused_port(), [portpicker.pick_unused_port()]
        cluster = service.start(port, 1, worker_ports=worker_ports)
        self.addCleanup(cluster.stop)
        self.assertEqual(cluster.address, f"grpc://127.0.0.1:{port}")
        self.assertEqual(cluster.worker_addresses, [f"127.0.0.1:{worker_ports[0]}"])

    def test_rejects_a_dispatcher_port_in_use(self):
        cluster = service.start(portpicker.pick_unused_port(), 1)
        self.addCleanup(cluster.stop)
        port = int(cluster.address.rsplit(":", 1)[1])
        with self.assertRaisesRegex(
            InputConfigError,
            rf"^port={port}: in use \(.*\); stop what listens there or "
            r"pick another port\.$",
        ):
            service.start(port, 1)

    def test_join_returns_after_stop_and_stop_twice_is_harmless(self):
        cluster = service.start(portpicker.pick_unused_port(), 1)
        joiner = threading.Thread(target=cluster.join, daemon=True)
        joiner.start()
        cluster.stop()
        joiner.join(_READ_TIMEOUT_S)
        self.assertFalse(joiner.is_alive())
        cluster.stop()

    def test_failed_start_stops_the_dispatcher(self):
        dispatchers = []  # Held, so that no destructor stops the dispatcher behind start's back.
        dispatch_server = tf.data.experimental.service.DispatchServer

        def start_and_hold(config):
            dispatchers.append(dispatch_server(config))
            return dispatchers[-1]

        port = portpicker.pick_unused_port()
        with (
            socket.socket() as taken,
            mock.patch.object(
                tf.data.experimental.service, "DispatchServer", side_effect=start_and_hold
            ),
        ):
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            with self.assertRaisesRegex(RuntimeError, "Could not start gRPC server"):
                service.start(
                    port, 2, worker_ports=[portpicker.pick_unused_port(), taken.getsockname()[1]]
                )
        self.assertLen(dispatchers, 1)
        with socket.socket() as probe:
            # SO_REUSEADDR ignores the closed connections' TIME_WAIT, not a listening dispatcher.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))


class ExactlyOnceTest(TfTestCase):
    """One dispatcher and 2 workers for the class; each test runs its own job."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        directory = tempfile.mkdtemp()
        cls.addClassCleanup(shutil.rmtree, directory)
        cls.paths = _write_id_files(directory)
        cls.cluster = service.start(portpicker.pick_unused_port(), _NUM_WORKERS)
        cls.addClassCleanup(cls.cluster.stop)

    def _distribute(self, mode: ServiceMode, **pipeline) -> tf.data.Dataset:
        return service.distribute(
            _id_batches(self.paths, **pipeline), self.cluster.address, mode, job_name=self.id()
        )

    def test_distributed_epoch_reads_every_id_once(self):
        [counts] = _read_ids(self._distribute(ServiceMode.DISTRIBUTED_EPOCH))
        self.assertEqual(counts, collections.Counter(range(_NUM_IDS)))

    def test_distributed_epoch_with_shuffled_files_and_examples_reads_every_id_once(self):
        [counts] = _read_ids(self._distribute(ServiceMode.DISTRIBUTED_EPOCH, shuffle=True))
        self.assertEqual(counts, collections.Counter(range(_NUM_IDS)))

    def test_consumers_sharing_a_job_read_every_id_once_between_them(self):
        first, second = _read_ids(
            self._distribute(ServiceMode.DISTRIBUTED_EPOCH),
            self._distribute(ServiceMode.DISTRIBUTED_EPOCH),
        )
        # How the ids divide between the consumers is up to their timing (either may even get
        # none); separate jobs would deliver every id twice.
        self.assertEqual(first + second, collections.Counter(range(_NUM_IDS)))

    def test_parallel_epochs_reads_every_id_once_per_service_worker(self):
        [counts] = _read_ids(self._distribute(ServiceMode.PARALLEL_EPOCHS))
        self.assertEqual(counts, collections.Counter(list(range(_NUM_IDS)) * _NUM_WORKERS))


@pytest.mark.parametrize("mode", list(ServiceMode))
def test_training_batches_mapped_several_per_call_cross_the_service_whole(
    small_shapes_data_dir, mode
):
    # 32 examples of 3 KB per replica: 4 batches per map call, split back before the service.
    cluster = service.start(portpicker.pick_unused_port(), _NUM_WORKERS)
    try:
        config = InputConfig(
            data_dir=small_shapes_data_dir,
            global_batch_size=32,
            tf_data_service=cluster.address,
            tf_data_service_mode=mode,
        )
        read = ReadOptions(split="train", training=True, placement=Placement(PreprocessOn.HOST))
        dataset = image_batches.examples(config, read, tf.distribute.InputContext(), announce=False)
        assert pipeline.batches_per_call(32, 32 * 32 * 3) == 4
        assert dataset.element_spec["image"].shape == (32, 32, 32, 3)
        batches = []
        thread = threading.Thread(
            target=lambda: batches.extend(dataset.take(25).as_numpy_iterator()), daemon=True
        )  # 25 x 32 > 640, one epoch.
        thread.start()
        thread.join(_READ_TIMEOUT_S)
        assert not thread.is_alive(), f"reading took over {_READ_TIMEOUT_S} s"
        assert [batch["label"].shape for batch in batches] == [(32,)] * 25
    finally:
        cluster.stop()
