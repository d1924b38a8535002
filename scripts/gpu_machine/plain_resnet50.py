"""The baseline with no tfdist at all: tf-keras ResNet-50 `fit` on one in-memory batch repeated,
no strategy, no input pipeline. Prints images/s over 30 steps after 10 of warm-up.

    python scripts/gpu_machine/plain_resnet50.py float32|mixed_float16 BATCH
"""

import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf  # pylint: disable=wrong-import-position
import tf_keras  # pylint: disable=wrong-import-position

_TIMED_STEPS = 30


def main(policy: str, batch_size: int) -> None:
    tf_keras.mixed_precision.set_global_policy(policy)
    model = tf_keras.applications.ResNet50(weights=None, classes=10, input_shape=(224, 224, 3))
    model.compile(tf_keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
    batch = (tf.random.uniform([batch_size, 224, 224, 3]), tf.zeros([batch_size], tf.int32))
    dataset = tf.data.Dataset.from_tensors(batch).repeat().prefetch(2)
    model.fit(dataset, steps_per_epoch=10, epochs=1, verbose=0)
    started = time.perf_counter()
    model.fit(dataset, steps_per_epoch=_TIMED_STEPS, epochs=1, verbose=0)
    seconds = time.perf_counter() - started
    print(
        f"plain {policy} batch {batch_size}: {_TIMED_STEPS * batch_size / seconds:.0f} "
        f"images/s, {1000 * seconds / _TIMED_STEPS:.1f} ms/step"
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
