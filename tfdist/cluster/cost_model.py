"""The cost model of `tfdist plan` (docs/PLANNING.md): a data-parallel step's time on a cluster
of nodes with GPUs, from what one box measures.

A step is the replica's compute (forward and backward pass), the gradient exchange (all-reduce,
or a parameter server's push and pull) less what of it hides behind the backward pass, and the
host's input pipeline, which prefetching overlaps with both:

    step = max(compute + exposed exchange, input)
    exposed exchange = max(0, exchange - overlap x backward_fraction x compute)

Steps to a target follow McCandlish et al. 2018 ("An empirical model of large-batch
training"): a global batch B needs S(B) = S_min (1 + B_crit / B) steps, B_crit the critical
batch (estimated by the gradient noise scale B_simple), so the time to the target is
S(B) x step. A doubling of the batch cuts the steps by B_crit / (2 (B + B_crit)): at least a
quarter, half of what perfect scaling would (a half), while B <= B_crit (`doubling_cut`).

Times are in seconds, sizes in bytes, bandwidths in bytes per second per direction. Pure Python:
no TensorFlow, so `tfdist plan` answers at once.
"""

import dataclasses
import math

GBIT_PER_S = 1e9 / 8  # Bytes per second of one Gbit/s.
WIRE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True)
class Link:
    """One direction of a link: `gbit_per_s` per GPU (inside a node) or per node (between
    nodes), and the latency of one message. `rdma`: the link can move GPU memory without the
    host (GPUDirect RDMA), as RoCE and InfiniBand can."""

    name: str
    gbit_per_s: float
    latency_us: float
    rdma: bool = False

    @property
    def bytes_per_s(self) -> float:
        return self.gbit_per_s * GBIT_PER_S

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


# Nominal one-direction rates per GPU (inside a node) or per node (between nodes); latencies
# per message as NCCL's tuning model puts them for its ring steps, 50 µs for TCP. Sources in
# docs/PLANNING.md ("Link presets").
INTRA_NODE_LINKS = {
    link.name: link
    for link in (
        Link("pcie3", 126, 5.7),
        Link("pcie4", 252, 5.7),
        Link("pcie5", 504, 5.7),
        Link("nvlink2", 1200, 3.4),
        Link("nvlink3", 2400, 3.4),
        Link("nvlink4", 3600, 3.4),
    )
}
INTER_NODE_LINKS = {
    link.name: link
    for link in (
        Link("eth10", 10, 50),
        Link("roce25", 25, 9.6, rdma=True),
        Link("eth100", 100, 50),
        Link("ib_edr", 100, 9.6, rdma=True),
        Link("ib_hdr", 200, 9.6, rdma=True),
        Link("ib_ndr", 400, 9.6, rdma=True),
    )
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one box measures of a training job.

    compute_s: one replica's step (forward and backward) at `per_replica_batch`, alone on its
      device, with no exchange (a 1-replica `tfdist benchmark` on synthetic data).
    gradient_bytes: the float32 gradients of one step (4 x trainable parameters).
    backward_fraction: the backward pass's share of `compute_s` (about 2/3: it computes two
      products per weight where the forward pass computes one).
    overlap: how much of the backward pass the exchange can run behind, 0 (exchange after the
      whole backward pass, as one all-reduce pack does) to 1 (a pack sent as soon as its
      gradients exist and no slower for it).
    example_pixels: values in one example's input tensor (height x width x channels).
    compute_dtype_bytes: bytes per value the host ships when it preprocesses (4 in float32, 2
      under mixed precision); with preprocessing on the device it ships uint8.
    host_examples_per_core: examples/s one host core's pipeline delivers with preprocessing on
      the host; `decode_examples_per_core` with only decoding and batching there.
    """

    compute_s: float
    per_replica_batch: int
    gradient_bytes: float
    backward_fraction: float = 2 / 3
    overlap: float = 0.0
    example_pixels: int = 32 * 32 * 3
    compute_dtype_bytes: int = 4
    host_examples_per_core: float = math.inf
    decode_examples_per_core: float = math.inf


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Nodes of `gpus_per_node` GPUs joined by `intra` inside a node and `inter` between nodes.

    allreduce: ring (one ring through every GPU) or hierarchical (reduce inside each node,
      all-reduce between nodes, broadcast inside each node).
    wire_dtype: what the gradients are cast to for the exchange.
    num_ps: parameter-server tasks, each on a node of its own; 0 exchanges by all-reduce.
    host_cores_per_node: cores for the input pipeline; None: as many as it needs.
    host_pcie: the link between GPUs and host memory, which traffic between nodes crosses
      twice without GPUDirect RDMA.
    inter_stack_gbps: what one node's network stack moves of an all-reduce between nodes
      where no link limits it (TensorFlow's gRPC ring over TCP: copies, serialising, parsing,
      reducing); unlimited when not measured. A parameter server's transfers are not held to
      it: whole variables stream while the wire moves them.
    """

    nodes: int
    gpus_per_node: int
    intra: Link
    inter: Link
    gpudirect_rdma: bool = False
    allreduce: str = "ring"
    wire_dtype: str = "float32"
    num_ps: int = 0
    host_cores_per_node: int | None = None
    host_pcie: Link = INTRA_NODE_LINKS["pcie4"]
    inter_stack_gbps: float = math.inf

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


# The exchange a ps task's link carries per step, in units of N S / (K B): 1 when the workers'
# pulls and pushes keep both directions busy, 2 when all pull then all push (`parameter_server_s`).
_PS_IN_STEP = 1.5


def through_stack(link: Link, stack_gbit_per_s: float) -> Link:
    """`link` when each byte also passes through a host's network stack that moves
    `stack_gbit_per_s` where no link limits it, one after the other: an all-reduce chunk is
    serialised, sent, parsed and reduced before the next ring step forwards it."""
    return Link(
        link.name, 1 / (1 / link.gbit_per_s + 1 / stack_gbit_per_s), link.latency_us, link.rdma
    )


def staged_through_host(link: Link, host: Link) -> Link:
    """`link` between nodes when GPU memory goes through host memory first (no GPUDirect RDMA):
    each byte also crosses the host's PCIe twice (GPU to host, host to NIC), and each message
    waits for a copy."""
    return Link(
        link.name,
        min(link.gbit_per_s, host.gbit_per_s / 2),
        link.latency_us + 2 * host.latency_us,
        link.rdma,
    )


def ring_allreduce_s(num_bytes: float, participants: int, link: Link) -> float:
    """A ring all-reduce: reduce-scatter then all-gather, each 'participants - 1' steps that
    move num_bytes / participants over the ring's slowest link."""
    if participants < 2:
        return 0.0
    steps = 2 * (participants - 1)
    return steps / participants * num_bytes / link.bytes_per_s + steps * link.latency_s


def hierarchical_allreduce_s(
    num_bytes: float, nodes: int, gpus_per_node: int, intra: Link, inter: Link
) -> float:
    """Two levels: a reduce-scatter inside each node, one ring all-reduce between nodes of the
    node's share (its GPUs run one ring each, over their 1/G of the bytes, sharing the node's
    link), and an all-gather inside each node."""
    inside = ring_allreduce_s(num_bytes, gpus_per_node, intra)  # Reduce-scatter + all-gather.
    between = 0.0
    if nodes > 1:
        steps = 2 * (nodes - 1)
        between = steps / nodes * num_bytes / inter.bytes_per_s + steps * inter.latency_s
    return inside + between


def parameter_server_s(num_bytes: float, workers: int, num_ps: int, link: Link) -> float:
    """Each worker pulls the variables, then (after its step) pushes its gradients, num_bytes
    each way, one after the other: TensorFlow reads a ps variable in the step and applies the
    update at its end. So a worker's own link takes at least 2 num_bytes / B per step. The
    variables are split evenly over `num_ps` tasks, whose links carry every worker's share,
    N num_bytes / K each way: workers in step (all pull, then all push) leave one direction
    idle at a time, 2 N S / (K B); workers out of step keep both busy, N S / (K B). Fair
    sharing of a ps task's link holds workers partly in step, by how much the model cannot
    tell, so it takes the middle of the two (`_PS_IN_STEP`); measured on shaped links, where
    the link dominates, 0.79-1.11 of it (docs/PLANNING.md, "Checked against links we
    control")."""
    worker_s = 2 * num_bytes / link.bytes_per_s
    ps_task_s = _PS_IN_STEP * workers * num_bytes / num_ps / link.bytes_per_s
    return max(worker_s, ps_task_s) + 2 * link.latency_s


def exchange_s(workload: Workload, cluster: Cluster) -> float:
    """The gradient exchange of one step, none of it hidden yet."""
    num_bytes = workload.gradient_bytes / 4 * WIRE_BYTES[cluster.wire_dtype]
    inter = (
        cluster.inter
        if cluster.gpudirect_rdma and cluster.inter.rdma
        else staged_through_host(cluster.inter, cluster.host_pcie)
    )
    if cluster.num_ps:
        # Every worker (a node's GPUs, reduced inside the node first) talks to the ps tasks, in
        # the variables' float32: the wire dtype is an all-reduce's (tfdist refuses
        # --allreduce_dtype under parameter_server), so it must not shrink these bytes.
        num_bytes = workload.gradient_bytes
        inside = ring_allreduce_s(num_bytes, cluster.gpus_per_node, cluster.intra)
        return inside + parameter_server_s(num_bytes, cluster.nodes, cluster.num_ps, inter)
    inter = through_stack(inter, cluster.inter_stack_gbps)
    if cluster.nodes == 1:
        return ring_allreduce_s(num_bytes, cluster.gpus_per_node, cluster.intra)
    if cluster.allreduce == "hierarchical":
        return hierarchical_allreduce_s(
            num_bytes, cluster.nodes, cluster.gpus_per_node, cluster.intra, inter
        )
    # One ring through every GPU crosses each node's link once each way, so the inter-node link
    # is its slowest hop, and every one of its steps waits for the slowest latency.
    slowest = Link(
        "ring",
        min(cluster.intra.gbit_per_s, inter.gbit_per_s),
        max(cluster.intra.latency_us, inter.latency_us),
    )
    return ring_allreduce_s(num_bytes, cluster.gpus, slowest)


def _input_s(examples: float, per_core: float, cores: int | None) -> float:
    """Seconds the host needs for `examples`; 0 when its cores are not limited."""
    return 0.0 if cores is None else examples / (per_core * cores)


def predict(workload: Workload, cluster: Cluster, *, preprocess_on: str = "device") -> dict:
    """One configuration's figures (times in seconds, rates per second), the 1-GPU run with the
    same input setting as its baseline."""
    compute = workload.compute_s
    exchange = exchange_s(workload, cluster)
    exposed = max(0.0, exchange - workload.overlap * workload.backward_fraction * compute)
    per_core = (
        workload.host_examples_per_core
        if preprocess_on == "host"
        else workload.decode_examples_per_core
    )
    node_examples = workload.per_replica_batch * cluster.gpus_per_node
    input_s = _input_s(node_examples, per_core, cluster.host_cores_per_node)
    step = max(compute + exposed, input_s)
    single = max(
        compute, _input_s(workload.per_replica_batch, per_core, cluster.host_cores_per_node)
    )
    examples_per_s = cluster.gpus * workload.per_replica_batch / step
    per_gpu_per_s = examples_per_s / cluster.gpus
    return {
        "nodes": cluster.nodes,
        "gpus": cluster.gpus,
        "global_batch": cluster.gpus * workload.per_replica_batch,
        "compute_s": compute,
        "exchange_s": exchange,
        "exposed_exchange_s": exposed,
        "input_s": input_s,
        "step_s": step,
        "examples_per_s": examples_per_s,
        "scaling_efficiency": single / step,
        "host_cores_needed": {
            "host": per_gpu_per_s * cluster.gpus_per_node / workload.host_examples_per_core,
            "device": per_gpu_per_s * cluster.gpus_per_node / workload.decode_examples_per_core,
        },
        "host_to_device_bytes_per_s": {
            "host": per_gpu_per_s * workload.example_pixels * workload.compute_dtype_bytes,
            "device": per_gpu_per_s * workload.example_pixels,
        },
    }


# A doubling of the GPUs pays while it cuts the time to the target by at least this much: half of
# perfect scaling's half, so the run's GPU-hours grow at most 1.5x per doubling. For the steps
# alone it holds exactly up to a global batch of B_crit (docs/PLANNING.md, "Scaling that stops
# paying").
PAYING_CUT = 0.25


def steps_ratio(global_batch: float, critical_batch: float, baseline_batch: float) -> float:
    """S(global_batch) / S(baseline_batch) under S(B) = S_min (1 + critical_batch / B): the steps
    to the same target, relative to training at `baseline_batch`."""
    return (1 + critical_batch / global_batch) / (1 + critical_batch / baseline_batch)


def doubling_cut(global_batch: float, critical_batch: float) -> float:
    """The share of the steps a doubling of `global_batch` saves: critical_batch / (2 (B +
    critical_batch)); 1/2 when B is far below the critical batch, `PAYING_CUT` at B = B_crit."""
    return 1 - steps_ratio(2 * global_batch, critical_batch, global_batch)


def cut_per_doubling(before: float, after: float, gpus_before: int, gpus_after: int) -> float:
    """The share of a time (`before` to `after`) saved per doubling of the GPUs, when going from
    `gpus_before` to `gpus_after` (the geometric mean over the doublings between them)."""
    return 1 - (after / before) ** (1 / math.log2(gpus_after / gpus_before))
