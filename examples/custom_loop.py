"""Your own training loop (`strategy.run` over your step) with `tfdist.CustomLoop`, under
multi-worker mirrored: tfdist builds the model and its optimizer recipe in the strategy's
scope, distributes your dataset function, scales the loss by the global batch, all-reduces
and transforms the gradients, and checkpoints so a restarted job resumes.

  tfdist launch --num_workers=2 -- python examples/custom_loop.py \
      --strategy=multi_worker_mirrored --model_dir=/tmp/loop
"""

import os
import sys

import tfdist

tfdist.define_flags()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=wrong-import-position
import keras_multi_worker as tutorial  # The same model and data, in a loop of your own.

_EXAMPLES = 4096


def main(argv):
    del argv
    config = tfdist.config_from_flags()  # Before TensorFlow's import: its start-up logs hidden.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    plan = tfdist.setup(config, train_examples=_EXAMPLES)
    loop = tfdist.CustomLoop(plan, tutorial.build_model)
    batches = loop.distribute(
        tutorial.dataset_fn(
            _EXAMPLES, seed=1, global_batch_size=plan.global_batch_size, training=True
        )
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    )

    def step(images, labels):
        with tf.GradientTape() as tape:
            logits = loop.model(images, training=True)
            loss = loop.scale_loss(loss_fn(labels, logits))
        loop.minimize(loss, tape)
        accuracy.update_state(labels, logits)
        return loss

    with loop.strategy.scope():
        accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
    for epoch in range(loop.restore(), plan.config.train.epochs):
        accuracy.reset_state()
        loss = loop.run(step, batches, plan.steps_per_epoch)
        loop.save(epoch + 1)
        print(
            f"{plan.task}: epoch {epoch + 1}: loss={loss:.4f} "
            f"accuracy={float(accuracy.result()):.4f}",
            flush=True,
        )


if __name__ == "__main__":
    tfdist.run(main)
