"""`tfdist doctor`: checks this task's cluster and this machine before a cluster job starts.

Prints the cluster and where it came from (TF_CONFIG, or in a JobSet pod each variable and the pod
field it was read from), this task's role, whether every task's name resolves, the local
devices, the Keras it trains with, the strategy `auto` would pick and what this machine's network
exposes (TensorFlow's servers listen on every interface). Exits 0 when sound; a problem is raised
as a one-line error (the CLI exits 2). `--probe` also connects to every peer, bounded (exit 1
when a peer cannot be resolved or reached).
"""

from absl import flags

from tfdist import strategies
from tfdist.cluster import network
from tfdist.cluster import probe
from tfdist.commands import flags as flags_lib
from tfdist.commands import train_flags
from tfdist.runtime import tf_import
from tfdist.strategies import ClusterConfig
from tfdist.strategies import StrategyConfig
from tfdist.strategies import StrategyKind
from tfdist.strategies import TaskType

_TF_CONFIG = flags.DEFINE_string(
    "tf_config", None, "TF_CONFIG JSON to check instead of the TF_CONFIG environment variable."
)
_PROBE = flags.DEFINE_bool(
    "probe",
    False,
    "doctor: also resolve every task's host, check that peers' ports "
    "answer (bounded by --probe_timeout_s) and warn about loopback "
    "addresses.",
)
_PROBE_TIMEOUT_S = flags_lib.define_duration(
    "probe_timeout_s", 5.0, "doctor: how long --probe may take in all."
)
flags_lib.register(
    "doctor",
    train_flags.STRATEGY,
    flags_lib.group(_TF_CONFIG, train_flags.CLUSTER_RESOLVER),
    train_flags.SLURM,
    flags_lib.group(_PROBE, _PROBE_TIMEOUT_S, train_flags.KERAS, train_flags.TF_LOGS),
)
EXIT_PROBE_PROBLEMS = 1


def _cluster_lines(cluster: ClusterConfig | None, source: list[str]) -> list[str]:
    if cluster is None:
        return [f"cluster: none ({source[0]} is not set); this is a single-process job"]
    lines = [f"cluster: valid, from {source[0]}", *source[1:]]
    lines += [f"  {job}: {', '.join(addresses)}" for job, addresses in cluster.jobs.items()]
    task = cluster.task
    address = cluster.task_address or "not listed (evaluators need no address)"
    lines.append(
        f"this task: {task.type.value}:{task.index} at {address}"
        f"{' (chief: writes checkpoints and summaries)' if cluster.is_chief else ''}"
    )
    return lines


def _device_lines(config: StrategyConfig) -> list[str]:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    gpus = strategies.visible_gpus()
    lines = [f"local devices: {len(tf.config.list_physical_devices('CPU'))} CPU, {len(gpus)} GPU"]
    lines += [f"  {gpu.name}: {tf.config.experimental.get_device_details(gpu)}" for gpu in gpus]
    if config.num_cpu_devices > 1:
        lines.append(f"  host CPU split into {config.num_cpu_devices} logical devices")
    if config.num_logical_gpus > 1:
        lines.append(
            f"  GPU 0 split into {config.num_logical_gpus} logical GPUs of "
            f"{config.logical_gpu_memory_mib} MiB"
        )
    return lines


def _strategy_line(config: StrategyConfig, cluster: ClusterConfig | None) -> str:
    replicas = strategies.num_replica_devices(config)
    kind = strategies.kind_for(config, cluster)
    chosen = "auto picks " if config.strategy is StrategyKind.AUTO else ""
    return (
        f"strategy: {chosen}{kind.value} "
        f"({_roles(kind, cluster)}, {replicas} local replica device(s))"
    )


def _roles(kind: StrategyKind, cluster: ClusterConfig | None) -> str:
    """The tasks that train: under parameter_server the chief only coordinates."""
    if cluster is None:
        return "1 worker(s)"
    if kind is StrategyKind.PARAMETER_SERVER:
        return (
            f"{len(cluster.jobs.get('chief', ()))} coordinator, "
            f"{len(cluster.jobs.get('worker', ()))} worker(s), {cluster.num_ps} ps"
        )
    return f"{cluster.num_workers} worker(s)"


def _network_line(cluster: ClusterConfig | None) -> str | None:
    """What this task's server, or else `tfdist launch`'s tasks, would expose; "warning: ..."
    when reachable beyond loopback. None for an evaluator, which serves no port."""
    interfaces = network.exposed_interfaces()
    if cluster is None:
        return _launch_network_line(interfaces)
    if cluster.task.type is TaskType.EVALUATOR:
        return None
    port = cluster.task_address.rpartition(":")[2]
    if not interfaces:
        return (
            f"network: loopback only here, so this task's port {port} is reachable from "
            "this network namespace alone"
        )
    return (
        f"warning: this task's gRPC server will listen on port {port} of every interface "
        "(TensorFlow binds 0.0.0.0 and [::]), open without authentication through "
        f"{', '.join(interfaces)}; run a one-machine job under `tfdist launch` (loopback-only "
        f"network), else firewall port {port} to the cluster's hosts (on Kubernetes, a "
        "NetworkPolicy that admits only the job's own pods)"
    )


def _launch_network_line(interfaces: list[str]) -> str:
    """Whether `tfdist launch` can keep its tasks' ports off `interfaces` on this machine."""
    refused = network.isolation_refusal()
    if refused is None:
        return (
            "network: `tfdist launch` runs its tasks in a network namespace with loopback "
            "only here, so nothing else reaches their ports"
        )
    if not interfaces:
        return "network: loopback only here, so nothing else reaches tasks' ports"
    return (
        f"warning: `tfdist launch` cannot isolate its tasks here ({refused}), so their ports "
        f"would accept unauthenticated connections through {', '.join(interfaces)} "
        "(TensorFlow binds every interface); run as root or allow unprivileged user "
        "namespaces, or firewall the ports"
    )


def _probe(cluster: ClusterConfig | None, config: StrategyConfig, timeout_s: float) -> bool:
    """Prints the network probe of `cluster`; returns whether it found no problems."""
    if cluster is None:
        print("probe: nothing to probe in a single-process job")
        return True
    report = probe.probe(
        cluster, timeout_s=timeout_s, collective_timeout_s=config.collective_timeout_s
    )
    print(
        "\n".join(
            report.lines
            + [f"warning: {line}" for line in report.warnings]
            + [f"problem: {line}" for line in report.problems]
        ),
        flush=True,
    )
    return not report.problems


def _keras_line(keras: int) -> str:
    """Which Keras this task trains with.

    Raises:
      KerasFlavourError: this process cannot train that Keras (one line says what to do).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tfdist.runtime import keras_flavour  # pylint: disable=import-outside-toplevel

    keras_flavour.require(keras)
    version = keras_flavour.api(keras).__version__
    if keras == 2:
        return (
            f"keras: tf-keras {version} (--keras=2): models are built with tf.keras or "
            "tf_keras and trained with Keras' fit"
        )
    tf_keras_is = "tf-keras" if tf.keras.__name__.startswith("tf_keras") else "Keras 3"
    return (
        f"keras: Keras {version} (--keras=3): models are built with `import keras` and "
        f"trained with tfdist's own distributed step; tf.keras is {tf_keras_is} here"
    )


def _names(cluster: ClusterConfig | None, timeout_s: float) -> None:
    """Prints whether every task's name resolves (no connects: peers may not run yet)."""
    if cluster is None:
        return
    report = probe.probe(cluster, timeout_s=timeout_s, connect=False)
    print(
        "\n".join(
            report.lines + [f"warning: {line}" for line in report.warnings + report.problems]
        ),
        flush=True,
    )


def main() -> int:
    """Checks --tf_config (else the cluster --cluster_resolver finds) and prints the report;
    with --probe, also probes the cluster's network (exit 1 on a problem found).

    Raises:
      ClusterConfigError, StrategyConfigError: the first problem found, in one line.
    """
    return report(
        _TF_CONFIG.value,
        train_flags.strategy_config(),
        show_tf_logs=train_flags.TF_LOGS.value,
        probe_peers=_PROBE.value,
        probe_timeout_s=_PROBE_TIMEOUT_S.value,
        keras=train_flags.keras(),
    )


def report(
    tf_config: str | None,
    config: StrategyConfig,
    *,
    show_tf_logs: bool,
    probe_peers: bool = False,
    probe_timeout_s: float = 5.0,
    keras: int = 2,
) -> int:
    """Checks `tf_config` (else the cluster --cluster_resolver finds) and prints the report:
    where each field came from and whether every task's name resolves; with `probe_peers`, also
    connects to every peer (exit 1 on a problem found); either within `probe_timeout_s`.

    Raises:
      ClusterConfigError, StrategyConfigError: the first problem found, in one line.
    """
    if tf_config is not None:
        cluster, source = strategies.parse_tf_config(tf_config), ["--tf_config"]
    else:
        cluster, source = train_flags.cluster_and_source()
    print("\n".join(_cluster_lines(cluster, source)), flush=True)
    tf_import.import_tensorflow(show_tf_logs, keras)
    print("\n".join(_device_lines(config)), flush=True)
    print(_keras_line(keras), flush=True)
    print(_strategy_line(config, cluster))
    network = _network_line(cluster)
    if network:
        print(network, flush=True)
    if not probe_peers:
        _names(cluster, probe_timeout_s)
    elif not _probe(cluster, config, probe_timeout_s):
        print("the probe found problems (above)")
        return EXIT_PROBE_PROBLEMS
    print("ok: no problems found")
    return 0
