"""Keras 3 variables that ParameterServerStrategy's `variable_partitioner` split over the ps tasks
(`--variable_partition`): what tfdist's Keras 3 step differentiates and updates, and the line that
says which ps task holds which rows.

A Keras 3 variable (keras/src/backend/tensorflow/core.py `Variable`) keeps the `tf.Variable` it
makes in the strategy's scope as its `value`. Under a partitioner that value is, for a variable
large enough, a ShardedVariable (tensorflow/python/distribute/sharded_variable.py): no
`tf.Variable` itself, but a list of them, one per ps task, each a block of rows. Reading the Keras
variable reads every shard (the ShardedVariable converts to their concatenation), so the model's
forward pass works; but the Keras variable acts as a resource variable
(`_should_act_as_resource_variable`), whose `handle` `tf.GradientTape.gradient` asks for, and it
takes that from its value, which has none: "'ShardedVariable' object has no attribute 'handle'".
The optimizer's slots and the gradient path's accumulators, colocated with their variable, would
meet the same. tf-keras lists the shards themselves as the model's variables.

So tfdist's step differentiates and updates the shards: each one behind a Keras 3 variable of its
own, `<path>/part_<i>`, that wraps the shard itself (no copy). The gradient of each is its block
of rows (sparse for an embedding), the optimizer makes each slot on the shard's ps task and
updates the shard there, as tf-keras does.

Saving meets the same gap: Keras saves a variable as what its value's `_serialize_to_tensors`
(the checkpoint protocol of TensorFlow's Trackable) gives, else as the value itself, which the
saver asks for a `device`; a ShardedVariable has neither. `make_savable` gives each one the
protocol: the whole tensor, read from the shards, under the key a whole variable's value has, so
a checkpoint restores into the variable split or whole (the evaluator's). (Not as slices, the
way TensorFlow saves a ShardedVariable of its own: a Trackable's restore through this protocol
receives one tensor per key, the first slice.) The whole variable passes through the
coordinator's memory when it is saved or restored.
"""

import keras
import tensorflow as tf

from tfdist.training.model import log_shards


def shards_of(variable: keras.Variable) -> list[tf.Variable]:
    """The shards of a Keras 3 `variable` the partitioner split, in row order; [] when it is
    whole. (TensorFlow exports the ShardedVariable class only under `tf.__internal__`, so it is
    recognised by what it holds.)"""
    value = variable.value
    if isinstance(value, tf.Variable):
        return []
    return list(getattr(value, "variables", []))


def trainable_shards(model: keras.Model) -> list[keras.Variable]:
    """`model`'s trainable variables with each split one replaced by its shards, each behind a
    Keras 3 variable `<path>/part_<i>` that wraps it (call in the strategy's scope, on the
    coordinator)."""
    variables = []
    for variable in model.trainable_variables:
        shards = shards_of(variable)
        if not shards:
            variables.append(variable)
            continue
        with keras.name_scope(variable.name, override_parent=variable.path.rpartition("/")[0]):
            variables.extend(
                keras.Variable(shard, name=f"part_{index}") for index, shard in enumerate(shards)
            )
    return variables


def constrained(model: keras.Model) -> list[keras.Variable]:
    """`model`'s split trainable variables with a constraint, which applies to the whole variable
    (the wraps of its shards carry none, lest it apply to each block of rows on its own)."""
    return [
        variable
        for variable in model.trainable_variables
        if variable.constraint is not None and shards_of(variable)
    ]


_VALUE = "VARIABLE_VALUE"  # A variable's checkpoint key, in TensorFlow's and Keras' protocol.


def make_savable(model: keras.Model) -> None:
    """Lets `model`'s split variables save and restore through Keras 3 (see above), whole.
    Call on the coordinator, before a checkpoint of the model is written or read."""
    for variable in model.variables:
        if shards_of(variable):
            _save_whole(variable.value)


def _save_whole(sharded) -> None:
    """Gives the ShardedVariable `sharded` the checkpoint protocol: saved as the tensor of the
    whole shape (its shards' concatenation), restored by splitting one."""

    def restore(restored: dict) -> None:
        sharded.assign(restored[_VALUE])

    sharded._serialize_to_tensors = lambda: {_VALUE: tf.convert_to_tensor(sharded)}
    sharded._restore_from_tensors = restore


def log_placement(model: keras.Model) -> None:
    """Says which ps task holds which rows of each split variable of `model`, one line per
    variable (`tfdist.training.model.log_shards`)."""
    for variable in model.variables:
        shards = shards_of(variable)
        if shards:
            log_shards(variable.path, shards)
