"""A user's own program for the engine tests: an MLP on generated data, written as README shows
(define_flags, config_from_flags, setup, fit, run). It prints its rank's final weights as one
digest line. With --kill_at_epoch=E the last worker SIGKILLs itself at the start of epoch E
once (a file in --model_dir remembers), as a node lost mid-run would end it; with
--term_at=E,S it sends itself SIGTERM at the start of step S of epoch E once, as a preemption
notice does (under parameter server the chief, which runs the callbacks); with
--hold_at_epoch=E the last worker of the run's first attempt waits at the start of epoch E (up
to --hold_s) until a preemption notice reaches it, so that a notice sent from outside (a
rehearsal's --preempt) lands mid-epoch however fast the steps run; with
--notice_at=setup|built|end the last worker sends itself its preemption signal before `setup`,
after it or after `fit`, once each.
"""

import hashlib
import json
import os
import signal
import time

from absl import flags

import tfdist

tfdist.define_flags()
_KILL_AT_EPOCH = flags.DEFINE_integer("kill_at_epoch", 0, "Kill the last worker at this epoch.")
_TERM_AT = flags.DEFINE_list("term_at", [], "EPOCH,STEP: SIGTERM the last worker there, once.")
_HOLD_AT_EPOCH = flags.DEFINE_integer("hold_at_epoch", 0, "Hold the last worker at this epoch.")
_HOLD_S = flags.DEFINE_float("hold_s", 120.0, "The longest hold.")
_NOTICE_AT = flags.DEFINE_multi_enum(
    "notice_at",
    [],
    ["setup", "built", "end"],
    "Send the last worker its preemption signal (--preemption_signal) there, once each: before "
    "setup, after it (before fit), after fit.",
)
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


def _mark(path: str) -> None:
    """Leaves a marker file at `path`, in a model dir that may be a URL (gs://): one byte, since
    TensorFlow's GCS file system uploads nothing for an empty file."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    with tf.io.gfile.GFile(path, "w") as marker:
        marker.write("1")


def killer(plan):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    marker = os.path.join(plan.config.train.model_dir, "killed-once")
    last = plan.num_workers - 1

    term_at = tuple(int(number) for number in _TERM_AT.value)

    def once(signum: int, where: str) -> None:
        if (last == 0 or plan.task.endswith(f":{last}")) and not tf.io.gfile.exists(marker):
            _mark(marker)
            print(f"{plan.task}: sending myself {signal.Signals(signum).name} {where}", flush=True)
            os.kill(os.getpid(), signum)

    # Only the run's first attempt holds, whether or not it reached the hold: a notice that came
    # before it must not leave the resumed run held without one.
    held = os.path.join(plan.config.train.model_dir, "held-once")
    holds = (last == 0 or plan.task.endswith(f":{last}")) and not tf.io.gfile.exists(held)
    if holds and _HOLD_AT_EPOCH.value:
        tf.io.gfile.makedirs(plan.config.train.model_dir)
        _mark(held)

    def hold_until_notice(epoch: int) -> None:
        """Waits until tfdist's notice handler (SIGTERM's) has noted a signal."""
        if not holds:
            return
        print(f"{plan.task}: holding at epoch {epoch + 1} until a preemption notice", flush=True)
        notice = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        deadline = time.monotonic() + _HOLD_S.value
        while not getattr(notice, "received", True) and time.monotonic() < deadline:
            time.sleep(0.05)

    class KillOnce(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # Reads no logs: its batch hooks run under PS too.

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            if epoch + 1 == _KILL_AT_EPOCH.value:
                once(signal.SIGKILL, f"at epoch {epoch + 1}")
            if epoch + 1 == _HOLD_AT_EPOCH.value:
                hold_until_notice(epoch)

        def on_train_batch_begin(self, batch, logs=None):
            if (self.epoch + 1, batch + 1) == term_at:
                once(signal.SIGTERM, f"at epoch {self.epoch + 1} step {batch + 1}")

    return KillOnce()


def notice_at(config, point: str) -> None:
    """Sends this task the run's preemption signal at `point`, once (a file in --model_dir
    remembers), if it is the last worker and --notice_at names the point."""
    cluster = config.cluster
    task = "local" if cluster is None else f"{cluster.task.type.value}:{cluster.task.index}"
    last = cluster is None or task == f"worker:{cluster.num_workers - 1}"
    marker = os.path.join(config.train.model_dir, f"noticed-at-{point}")
    if point in _NOTICE_AT.value and last and not os.path.exists(marker):
        os.makedirs(config.train.model_dir, exist_ok=True)
        open(marker, "w", encoding="utf-8").close()
        signum = signal.Signals[config.train.preemption_signal.value]
        print(f"{task}: sending myself {signum.name} at {point}", flush=True)
        os.kill(os.getpid(), signum)


def main(argv):
    del argv
    config = tfdist.config_from_flags()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    notice_at(config, "setup")
    plan = tfdist.setup(config, train_examples=_EXAMPLES)
    notice_at(config, "built")
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
    notice_at(config, "end")
    weights = b"".join(w.numpy().tobytes() for w in model_holder[-1].weights)
    print(
        "digest " + json.dumps({"task": plan.task, "sha": hashlib.sha256(weights).hexdigest()}),
        flush=True,
    )


if __name__ == "__main__":
    tfdist.run(main)
