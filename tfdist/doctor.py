"""`tfdist doctor`: checks TF_CONFIG and this machine before a cluster job starts.

Prints the cluster, this task's role, the local devices and the strategy `auto` would pick.
Exits 0 when sound; a problem is raised as a one-line error (the CLI exits 2). `--probe` adds a
bounded network check of every task (exit 1 when a peer cannot be resolved or reached).
"""

import strategies
from strategies import ClusterConfig
from strategies import StrategyConfig
from strategies import StrategyKind
from tfdist import probe
from tfdist.process import import_tensorflow

EXIT_PROBE_PROBLEMS = 1


def _cluster_lines(cluster: ClusterConfig | None, source: str) -> list[str]:
    if cluster is None:
        return [f"TF_CONFIG: not set ({source}); this is a single-process job"]
    lines = [f"TF_CONFIG: valid ({source})"]
    lines += [f"  {job}: {', '.join(addresses)}" for job, addresses in cluster.jobs.items()]
    task = cluster.task
    address = cluster.task_address or "not listed (evaluators need no address)"
    lines.append(f"this task: {task.type.value}:{task.index} at {address}"
                 f"{' (chief: writes checkpoints and summaries)' if cluster.is_chief else ''}")
    return lines


def _device_lines(config: StrategyConfig) -> list[str]:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    gpus = tf.config.list_physical_devices("GPU")
    lines = [f"local devices: {len(tf.config.list_physical_devices('CPU'))} CPU, {len(gpus)} GPU"]
    lines += [f"  {gpu.name}: {tf.config.experimental.get_device_details(gpu)}" for gpu in gpus]
    if config.num_cpu_devices > 1:
        lines.append(f"  host CPU split into {config.num_cpu_devices} logical devices")
    return lines


def _strategy_line(config: StrategyConfig, cluster: ClusterConfig | None) -> str:
    replicas = strategies.num_replica_devices(config)
    kind = strategies.resolve_kind(config.strategy, cluster, replicas)
    workers = cluster.num_workers if cluster else 1
    chosen = "auto picks " if config.strategy is StrategyKind.AUTO else ""
    return (f"strategy: {chosen}{kind.value} "
            f"({workers} worker(s), {replicas} local replica device(s))")


def _probe(cluster: ClusterConfig | None, config: StrategyConfig, timeout_s: float) -> bool:
    """Prints the network probe of `cluster`; returns whether it found no problems."""
    if cluster is None:
        print("probe: nothing to probe in a single-process job")
        return True
    report = probe.probe(cluster, timeout_s=timeout_s,
                         collective_timeout_s=config.collective_timeout_s)
    print("\n".join(report.lines + [f"warning: {line}" for line in report.warnings] +
                    [f"problem: {line}" for line in report.problems]), flush=True)
    return not report.problems


def main(tf_config: str | None, config: StrategyConfig, *, show_tf_logs: bool,
         probe_timeout_s: float | None = None) -> int:
    """Checks `tf_config` (else the TF_CONFIG environment variable) and prints the report;
    with `probe_timeout_s`, also probes the cluster's network (exit 1 on a problem found).

    Raises:
      ClusterConfigError, StrategyConfigError: the first problem found, in one line.
    """
    if tf_config is not None:
        cluster, source = strategies.parse_tf_config(tf_config), "from --tf_config"
    else:
        cluster, source = strategies.from_environment(), "from the environment"
    print("\n".join(_cluster_lines(cluster, source)), flush=True)
    import_tensorflow(show_tf_logs)
    print("\n".join(_device_lines(config)), flush=True)
    print(_strategy_line(config, cluster))
    if probe_timeout_s is not None and not _probe(cluster, config, probe_timeout_s):
        print("the probe found problems (above)")
        return EXIT_PROBE_PROBLEMS
    print("ok: no problems found")
    return 0
