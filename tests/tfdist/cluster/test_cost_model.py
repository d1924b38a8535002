"""The cost model of `tfdist plan` against figures worked out by hand."""

import dataclasses
import math
import unittest

from tfdist.cluster import cost_model

# 8 Gbit/s = 1e9 bytes/s per direction, 10 µs per message: round numbers to work by hand.
LINK = cost_model.Link("test", 8, 10)
SLOW = cost_model.Link("slow", 0.8, 100, rdma=True)


class AllReduceTest(unittest.TestCase):
    def test_a_ring_moves_twice_the_bytes_less_one_share_over_its_slowest_link(self):
        # 4 participants: 6 steps of 1e9 / 4 bytes each = 1.5 s, and 6 latencies.
        self.assertAlmostEqual(cost_model.ring_allreduce_s(1e9, 4, LINK), 1.5 + 6e-5)
        self.assertEqual(cost_model.ring_allreduce_s(1e9, 1, LINK), 0.0)

    def test_hierarchical_crosses_nodes_with_the_node_share_only(self):
        # Inside: a 4-GPU ring (1.5 s + 6 x 10 µs); between 2 nodes: 2 steps of 1e9 / 2 bytes
        # at 1e8 bytes/s = 10 s, and 2 x 100 µs.
        expected = 1.5 + 6e-5 + 10 + 2e-4
        self.assertAlmostEqual(cost_model.hierarchical_allreduce_s(1e9, 2, 4, LINK, SLOW), expected)

    def test_a_flat_ring_over_nodes_waits_on_the_node_link_each_step(self):
        cluster = cost_model.Cluster(
            nodes=2, gpus_per_node=4, intra=LINK, inter=SLOW, gpudirect_rdma=True
        )
        workload = cost_model.Workload(compute_s=1, per_replica_batch=1, gradient_bytes=1e9)
        # 8 GPUs: 14 steps of 1e9 / 8 bytes at 1e8 bytes/s, 14 x 100 µs.
        self.assertAlmostEqual(cost_model.exchange_s(workload, cluster), 17.5 + 14e-4)

    def test_parameter_servers_are_bound_by_the_busier_side(self):
        # 4 workers, 2 ps: each ps carries 4 x 1e9 / 2 bytes each way = 2 s at 1e9 bytes/s;
        # between 2 s (both directions busy) and 4 s (the pulls then the pushes): 3 s.
        self.assertAlmostEqual(cost_model.parameter_server_s(1e9, 4, 2, LINK), 3 + 2e-5)
        # 2 workers, 2 ps: a worker's own link, 1 s each way one after the other, is the slower.
        self.assertAlmostEqual(cost_model.parameter_server_s(1e9, 2, 2, LINK), 2 + 2e-5)
        self.assertAlmostEqual(cost_model.parameter_server_s(1e9, 1, 4, LINK), 2 + 2e-5)

    def test_a_host_stack_adds_its_time_to_an_all_reduce_between_nodes_only(self):
        workload = cost_model.Workload(compute_s=1, per_replica_batch=1, gradient_bytes=1e9)
        cluster = cost_model.Cluster(
            nodes=2, gpus_per_node=1, intra=LINK, inter=SLOW, gpudirect_rdma=True
        )
        stacked = dataclasses.replace(cluster, inter_stack_gbps=0.8)
        # 2 nodes: 2 steps of 1e9 / 2 bytes at 1e8 bytes/s = 10 s on the wire, 10 s more in
        # a stack as fast as the link; the 2 latencies once.
        self.assertAlmostEqual(cost_model.exchange_s(workload, cluster), 10 + 2e-4)
        self.assertAlmostEqual(cost_model.exchange_s(workload, stacked), 20 + 2e-4)
        inside = dataclasses.replace(stacked, nodes=1, gpus_per_node=2)
        self.assertAlmostEqual(cost_model.exchange_s(workload, inside), 1 + 2e-5)
        with_ps = dataclasses.replace(cluster, num_ps=2)
        self.assertEqual(
            cost_model.exchange_s(workload, with_ps),
            cost_model.exchange_s(workload, dataclasses.replace(with_ps, inter_stack_gbps=0.8)),
        )

    def test_without_gpudirect_traffic_between_nodes_goes_through_host_memory(self):
        host = cost_model.Link("pcie", 1.2, 5)
        staged = cost_model.staged_through_host(cost_model.Link("net", 1.0, 2), host)
        self.assertEqual((staged.gbit_per_s, staged.latency_us), (0.6, 12))
        fast_host = cost_model.staged_through_host(
            cost_model.Link("net", 1.0, 2), cost_model.Link("pcie", 100, 5)
        )
        self.assertEqual(fast_host.gbit_per_s, 1.0)

    def test_a_narrower_wire_dtype_moves_half_the_bytes(self):
        workload = cost_model.Workload(compute_s=1, per_replica_batch=1, gradient_bytes=1e9)
        cluster = cost_model.Cluster(nodes=1, gpus_per_node=4, intra=LINK, inter=SLOW)
        full = cost_model.exchange_s(workload, cluster)
        half = cost_model.exchange_s(workload, dataclasses.replace(cluster, wire_dtype="bfloat16"))
        self.assertAlmostEqual(half - 6e-5, (full - 6e-5) / 2)


class PredictTest(unittest.TestCase):
    def setUp(self):
        super().setUp()
        # 4 GPUs: an exchange of 1.5 s + 60 µs against 3 s of compute, 2 s of it backward.
        self.cluster = cost_model.Cluster(nodes=1, gpus_per_node=4, intra=LINK, inter=SLOW)
        self.workload = cost_model.Workload(
            compute_s=3.0,
            per_replica_batch=100,
            gradient_bytes=1e9,
            example_pixels=1000,
            host_examples_per_core=50,
            decode_examples_per_core=200,
        )

    def test_the_exchange_hides_behind_the_share_of_the_backward_pass_given(self):
        exchange = 1.5 + 6e-5
        for overlap, exposed in ((0.0, exchange), (0.5, exchange - 1.0), (1.0, 0.0)):
            with self.subTest(overlap=overlap):
                figures = cost_model.predict(
                    dataclasses.replace(self.workload, overlap=overlap), self.cluster
                )
                self.assertAlmostEqual(figures["exposed_exchange_s"], exposed)
                self.assertAlmostEqual(figures["step_s"], 3.0 + exposed)
                self.assertAlmostEqual(figures["scaling_efficiency"], 3.0 / (3.0 + exposed))

    def test_examples_cores_and_bytes_follow_the_step(self):
        figures = cost_model.predict(self.workload, self.cluster)
        step = 3.0 + 1.5 + 6e-5
        self.assertAlmostEqual(figures["examples_per_s"], 400 / step)
        per_gpu = 100 / step
        self.assertAlmostEqual(figures["host_cores_needed"]["host"], 4 * per_gpu / 50)
        self.assertAlmostEqual(figures["host_cores_needed"]["device"], 4 * per_gpu / 200)
        self.assertAlmostEqual(figures["host_to_device_bytes_per_s"]["host"], per_gpu * 4000)
        self.assertAlmostEqual(figures["host_to_device_bytes_per_s"]["device"], per_gpu * 1000)

    def test_too_few_host_cores_make_the_input_the_step(self):
        # A node's 400 examples per step at 50/s on 1 core take 8 s, more than the 4.5 s of
        # compute and exchange.
        one_core = dataclasses.replace(self.cluster, host_cores_per_node=1)
        figures = cost_model.predict(self.workload, one_core, preprocess_on="host")
        self.assertAlmostEqual(figures["input_s"], 8.0)
        self.assertAlmostEqual(figures["step_s"], 8.0)
        # The 1-GPU baseline reads 100 examples in 2 s on that core, under its 3 s compute.
        self.assertAlmostEqual(figures["scaling_efficiency"], 3.0 / 8.0)
        device = cost_model.predict(self.workload, one_core, preprocess_on="device")
        self.assertAlmostEqual(device["input_s"], 2.0)

    def test_one_gpu_scales_perfectly_and_unlimited_hosts_need_no_cores(self):
        workload = cost_model.Workload(compute_s=1, per_replica_batch=8, gradient_bytes=1e9)
        one = cost_model.predict(
            workload, cost_model.Cluster(nodes=1, gpus_per_node=1, intra=LINK, inter=SLOW)
        )
        self.assertEqual(one["scaling_efficiency"], 1.0)
        self.assertEqual(one["host_cores_needed"]["host"], 0.0)
        self.assertFalse(math.isnan(one["host_cores_needed"]["device"]))


if __name__ == "__main__":
    unittest.main()
