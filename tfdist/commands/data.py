"""`tfdist data check` and `tfdist data serve`: the input side of a job, before and beside it.

`data check` reads one epoch as `--num_workers` simulated workers would and reports the sharding
plan, examples per worker, duplicates and missing examples: does every pipeline read each
example exactly once? `data serve` runs a tf.data service dispatcher and its workers for
`--tf_data_service`, until interrupted; with `--jobset_pod`, one JobSet pod's part of it.
"""

import signal
import threading

from absl import flags

from tfdist import input_pipelines
from tfdist.cluster import network
from tfdist.commands import cli_flags
from tfdist.commands import flags as flags_lib
from tfdist.commands import train_flags
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Records
from tfdist.input_pipelines import SourceKind
from tfdist.runtime import output_files
from tfdist.runtime import paths
from tfdist.runtime import plugins
from tfdist.runtime import tf_import
from tfdist.runtime.config import ConfigError
from tfdist.strategies import ClusterConfigError
from tfdist.strategies import jobset
from tfdist.strategies.config import MAX_REPLICA_DEVICES

_REPLICAS_PER_WORKER = flags_lib.define_integer(
    "replicas_per_worker",
    1,
    "data check: replicas on each simulated worker.",
    lower_bound=1,
    upper_bound=MAX_REPLICA_DEVICES,
)
_PORT = flags_lib.define_integer(
    "port",
    5050,
    "data serve: port of the tf.data service dispatcher.",
    lower_bound=1,
    upper_bound=65535,
)
flags_lib.register(
    "data check",
    train_flags.SOURCE,
    flags_lib.group(
        train_flags.SEED,
        cli_flags.NUM_WORKERS,
        _REPLICAS_PER_WORKER,
        cli_flags.JSON,
        train_flags.TF_LOGS,
    ),
)
_JOBSET_POD = flags.DEFINE_bool(
    "jobset_pod",
    False,
    "data serve: serve this JobSet pod's part of the tf.data service, as "
    "`tfdist manifest --format=jobset --data_service_workers=N` sets it up: "
    "the dispatcher in a `dispatcher` pod, one worker in each `data-worker` "
    "pod, on the JobSet's port at the pods' DNS names (--port and "
    "--num_workers do not apply).",
)
flags_lib.register(
    "data serve", flags_lib.group(_PORT, cli_flags.NUM_WORKERS, _JOBSET_POD, train_flags.TF_LOGS)
)


def check_main() -> int:
    """`tfdist data check`: the flags' inputs checked before TensorFlow starts, then the report
    (exit 1 unless each example is read exactly once)."""
    config = train_flags.input_config("data check")
    paths.check_input_dir("data_dir", config.data_dir)
    plugins.check_findable(dataset=config.dataset)
    paths.check_output_file("json", cli_flags.JSON.value)
    tf_import.import_tensorflow(train_flags.TF_LOGS.value)
    return check_coverage(
        config, cli_flags.NUM_WORKERS.value, _REPLICAS_PER_WORKER.value, cli_flags.JSON.value
    )


def serve_main() -> int:
    """`tfdist data serve`.

    Raises:
      UsageError: --port or --num_workers with --jobset_pod.
      ClusterConfigError: --jobset_pod outside a tf.data service pod of a JobSet tfdist wrote.
    """
    if not _JOBSET_POD.value:
        tf_import.import_tensorflow(train_flags.TF_LOGS.value)
        return serve(_PORT.value, cli_flags.NUM_WORKERS.value)
    given = [holder.name for holder in (_PORT, cli_flags.NUM_WORKERS) if holder.present]
    if given:
        raise flags_lib.UsageError(
            f"--{given[0]} does not apply with --jobset_pod, which serves "
            "on the JobSet's port; drop it."
        )
    pod = jobset.from_environment()
    if pod.replicated_job not in jobset.SERVICE_JOBS:
        raise ClusterConfigError(
            f"data serve --jobset_pod: this pod is {pod.replicated_job}:{pod.pod_index}, not "
            f"a tf.data service pod ({' or '.join(jobset.SERVICE_JOBS)}); run `tfdist train` "
            "here instead."
        )
    tf_import.import_tensorflow(train_flags.TF_LOGS.value)
    dispatcher = (
        None if pod.replicated_job == jobset.DISPATCHER else pod.address(jobset.DISPATCHER, 0)
    )
    part = input_pipelines.start_service_part(
        pod.port, dispatcher=dispatcher, advertised=pod.own_address
    )
    role = "dispatcher" if dispatcher is None else f"worker of the dispatcher at {dispatcher}"
    return _serve_until_stopped(
        part, f"tfdist data serve: {role}, reached at {pod.own_address}; Ctrl-C stops"
    )


EXIT_NOT_EXACTLY_ONCE = 1


def check_coverage(
    config: InputConfig, num_workers: int, replicas_per_worker: int, json_path: str | None
) -> int:
    """Prints the coverage report of `config`'s dataset, or of the `tfdist.Records` that its
    `python:` dataset function returns for "train" (and writes it to `json_path`); 0 when each
    example of one epoch is read exactly once, else 1.

    Raises:
      InputConfigError: the dataset, plan or batch size cannot work, in one line.
    """
    input_pipelines.per_replica_batch_size(
        config.global_batch_size, num_workers * replicas_per_worker
    )
    records = None
    if config.source_kind is SourceKind.PYTHON:
        records = plugins.dataset_splits(config.dataset)["train"]
        if not isinstance(records, Records):
            raise ConfigError(
                f"dataset={config.dataset!r} returns a "
                f"{type(records).__name__} for 'train'; data check counts the "
                "examples of a tfdist.Records (files and parse_fn), so return one."
            )
    report = input_pipelines.check_coverage(
        config, num_workers=num_workers, replicas_per_worker=replicas_per_worker, records=records
    )
    print("\n".join(report.lines()))
    if json_path:
        output_files.write_json("json", json_path, report.as_dict())
    return 0 if report.exactly_once else EXIT_NOT_EXACTLY_ONCE


def serve(port: int, num_workers: int) -> int:
    """Starts the dispatcher on `port` and `num_workers` workers on 127.0.0.1, prints the address
    to pass as --tf_data_service and what the servers expose, and serves until SIGINT or SIGTERM;
    returns 0."""
    cluster = input_pipelines.start_service(port, num_workers)
    return _serve_until_stopped(
        cluster,
        f"tfdist data serve: dispatcher at {cluster.address} with {num_workers} "
        f"worker(s) ({', '.join(cluster.worker_addresses)}); train with "
        f"--tf_data_service={cluster.address}; "
        f"{_exposure([cluster.address, *cluster.worker_addresses])}; Ctrl-C stops",
    )


def _serve_until_stopped(servers, banner: str) -> int:
    """Prints `banner` and keeps `servers` running until SIGINT or SIGTERM; returns 0."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        print(banner, flush=True)
        stop.wait()
    finally:
        servers.stop()
    return 0


def _exposure(addresses: list[str]) -> str:
    """What the servers at `addresses` expose: TensorFlow binds every interface, whatever host
    they advertise, and the service must stay reachable from trainers, so it runs on this
    machine's network (not in a namespace of its own, as `tfdist launch`'s tasks do)."""
    ports = [int(address.rpartition(":")[2]) for address in addresses]
    interfaces = network.exposed_interfaces()
    fix = "; firewall them on an untrusted network" if interfaces else ""
    return network.exposure(ports, interfaces) + fix
