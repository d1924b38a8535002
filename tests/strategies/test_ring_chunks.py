"""tfdist.strategies.ring_chunks: an all-reduce without its own `max_subdivs_per_device` takes
ours; one with its own keeps it."""

import tensorflow as tf

from tests.tf_test_case import TfTestCase


class RingChunksTest(TfTestCase):
    def test_all_reduces_without_their_own_subdivisions_take_ours(self):
        from tfdist.strategies import ring_chunks  # pylint: disable=import-outside-toplevel
        from tensorflow.python.ops import collective_ops  # pylint: disable=import-outside-toplevel

        ring_chunks.apply()
        ring_chunks.apply()  # Once per process, however often strategies are built.

        def traced(**kwargs):
            graph = (
                tf.function(
                    lambda: collective_ops.all_reduce_v2(
                        tf.ones([4]), group_size=2, group_key=1, instance_key=1, **kwargs
                    )
                )
                .get_concrete_function()
                .graph
            )
            op = next(op for op in graph.get_operations() if op.type == "CollectiveReduceV2")
            return op.get_attr("max_subdivs_per_device")

        self.assertEqual(traced(), ring_chunks.MAX_SUBDIVS_PER_DEVICE)
        self.assertEqual(traced(max_subdivs_per_device=2), 2)


if __name__ == "__main__":
    tf.test.main()
