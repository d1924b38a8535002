"""A user's own program for the engine tests: an MLP on generated data, written as README shows
(define_flags, config_from_flags, setup, fit, run). It prints its rank's final weights as one
digest line, and with --kill_at_epoch=E the last worker SIGKILLs itself at the start of epoch E
once (a file in --model_dir remembers), as a node lost mid-run would end it.
"""

import hashlib
import json
import os
import signal

from absl import flags

import tfdist

tfdist.define_flags()
_KILL_AT_EPOCH = flags.DEFINE_integer("kill_at_epoch", 0, "Kill the last worker at this epoch.")
_EXAMPLES = 512


def dataset_fn(global_batch_size: int):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        features = tf.random.stateless_normal((_EXAMPLES, 8), seed=(1, 2))
        labels = tf.cast(tf.reduce_sum(features[:, :4], axis=1) > 0, tf.int32)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset.repeat().batch(context.get_per_replica_batch_size(global_batch_size))

    return make


def killer(plan):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    marker = os.path.join(plan.config.train.model_dir, "killed-once")
    last = plan.num_workers - 1

    class KillOnce(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch + 1 == _KILL_AT_EPOCH.value and plan.task.endswith(f":{last}"):
                if not os.path.exists(marker):
                    open(marker, "w", encoding="utf-8").close()
                    print(f"{plan.task}: killing myself at epoch {epoch + 1}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)

    return KillOnce()


def main(argv):
    del argv
    config = tfdist.config_from_flags()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    plan = tfdist.setup(config, train_examples=_EXAMPLES)
    model_holder = []

    def build():
        tf.keras.utils.set_random_seed(5)
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Input((8,)),
                tf.keras.layers.Dense(16, activation="relu"),
                tf.keras.layers.Dense(2),
            ]
        )
        model_holder.append(model)
        return model

    tfdist.fit(
        plan,
        build,
        dataset_fn(plan.global_batch_size),
        validation_data=None,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        callbacks=[killer(plan)],
    )
    weights = b"".join(w.numpy().tobytes() for w in model_holder[-1].weights)
    print(
        "digest " + json.dumps({"task": plan.task, "sha": hashlib.sha256(weights).hexdigest()}),
        flush=True,
    )


if __name__ == "__main__":
    tfdist.run(main)
