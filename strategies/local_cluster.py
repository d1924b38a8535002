"""`make_cluster`: a validated cluster whose tasks all run on one host, from counts of tasks
and their ports (local tests, `tfdist launch`). Pure Python, like `cluster`."""

from collections.abc import Sequence

from .addresses import is_ipv6
from .cluster import ClusterConfig
from .cluster import ClusterConfigError
from .cluster import parse_tf_config


def make_cluster(
    *,
    num_workers: int,
    num_ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    ports: Sequence[int],
    host: str = "127.0.0.1",
    task: tuple[str, int] | None = None,
) -> ClusterConfig:
    """Builds a validated cluster whose tasks all run on `host`, e.g. for local tests.

    Args:
        num_workers: the size of the "worker" job (the chief, if any, comes on top).
        num_ps: the number of parameter servers.
        chief: whether to add a chief.
        evaluator: whether to add an evaluator.
        ports: one port per task, in the order chief, workers, ps, evaluator.
        host: the host of every task; an IPv6 address is bracketed for you.
        task: this process's (type, index); the chief if there is one, else worker 0.

    Raises:
        ClusterConfigError: the counts are negative, there is no worker, `ports` does not have
            one port per task, or the resulting cluster is invalid.
    """
    sizes = {"chief": int(chief), "worker": num_workers, "ps": num_ps, "evaluator": int(evaluator)}
    if num_workers < 1 or num_ps < 0:
        raise ClusterConfigError(
            f"make_cluster: num_workers={num_workers}, num_ps={num_ps}; "
            "a cluster needs num_workers >= 1 and num_ps >= 0."
        )
    if len(ports) != sum(sizes.values()):
        raise ClusterConfigError(
            f"make_cluster: got {len(ports)} ports for {sum(sizes.values())} tasks "
            f"({', '.join(f'{job}={n}' for job, n in sizes.items())}); pass one "
            "port per task, in the order chief, workers, ps, evaluator."
        )
    host = f"[{host}]" if is_ipv6(host) else host
    next_port = iter(ports)
    cluster = {job: [f"{host}:{next(next_port)}" for _ in range(n)] for job, n in sizes.items()}
    task_type, index = task or ("chief" if chief else "worker", 0)
    return parse_tf_config({"cluster": cluster, "task": {"type": task_type, "index": index}})
