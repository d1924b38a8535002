"""The learning-rate schedule against its formulas, and optimizers built from OptimizerConfig."""

import math

import tensorflow as tf
import tf_keras
from absl.testing import parameterized

import tfdist
from tfdist.input_pipelines import InputConfig
from tfdist.optim import recipe as optim
from tfdist.optim.gradient_path import GradientTransforms
from tfdist.runtime.config import ConfigError
from tfdist.runtime.optimizer_config import OptimizerConfig
from tfdist.runtime.config import RunConfig
from tfdist.runtime.config import TrainConfig
from tfdist.runtime.optimizer_config import check_peak_learning_rate
from tfdist.training.keras2 import fit as keras2_train
from tests.tf_test_case import TfTestCase

_STEPS_PER_EPOCH = 10
_EPOCHS = 5


def _rate(config: OptimizerConfig, step: int, global_batch_size: int = 1024) -> float:
    schedule = optim.learning_rate_schedule(config, global_batch_size, _STEPS_PER_EPOCH, _EPOCHS)
    return float(schedule(step))


class ScheduleTest(TfTestCase, parameterized.TestCase):
    @parameterized.parameters(("none", 0.1), ("linear", 0.4), ("sqrt", 0.2))
    def test_peak_is_the_scaled_rate(self, scaling, peak):
        config = OptimizerConfig(learning_rate=0.1, lr_scaling=scaling, base_batch_size=256)
        self.assertAllClose(_rate(config, 0), peak)  # 1024 / 256 = 4.
        self.assertAllClose(_rate(config, 29), peak)

    def test_warmup_rises_step_by_step_from_the_unscaled_rate_to_the_peak(self):
        config = OptimizerConfig(learning_rate=0.1, lr_scaling="linear", warmup_epochs=2)
        warmup_steps, peak = 2 * _STEPS_PER_EPOCH, 0.4
        for step in (0, 1, 7, 19):
            self.assertAllClose(_rate(config, step), 0.1 + (peak - 0.1) * step / warmup_steps)
        self.assertAllClose(_rate(config, 20), peak)
        self.assertAllClose(_rate(config, 49), peak)

    def test_fractional_warmup_epochs(self):
        config = OptimizerConfig(learning_rate=0.1, lr_scaling="linear", warmup_epochs=0.5)
        self.assertAllClose(_rate(config, 4), 0.1 + 0.3 * 4 / 5)
        self.assertAllClose(_rate(config, 5), 0.4)

    def test_warmup_steps_round_to_the_nearest_update(self):
        # 0.26 epochs of 10 updates are 2.6 updates: warmup ends after 3, not 2.
        config = OptimizerConfig(learning_rate=0.1, lr_scaling="linear", warmup_epochs=0.26)
        schedule = optim.learning_rate_schedule(config, 1024, _STEPS_PER_EPOCH, _EPOCHS)
        self.assertEqual(schedule.warmup_steps, 3)
        self.assertAllClose(_rate(config, 2), 0.1 + 0.3 * 2 / 3)
        self.assertAllClose(_rate(config, 3), 0.4)

    def test_cosine_runs_from_the_peak_over_the_remaining_steps(self):
        config = OptimizerConfig(
            learning_rate=0.1, lr_scaling="linear", warmup_epochs=1, lr_schedule="cosine"
        )
        warmup, total, peak = 10, 50, 0.4
        for step in (10, 23, 30, 49, 50, 60):
            progress = min((step - warmup) / (total - warmup), 1.0)
            self.assertAllClose(
                _rate(config, step), peak * 0.5 * (1 + math.cos(math.pi * progress)), atol=1e-7
            )

    def test_step_decay_at_boundaries_in_epochs(self):
        config = OptimizerConfig(
            learning_rate=0.1, lr_schedule="step", lr_step_boundaries=(2, 3.5), lr_step_factor=0.5
        )
        for step, rate in ((0, 0.1), (19, 0.1), (20, 0.05), (34, 0.05), (35, 0.025), (49, 0.025)):
            self.assertAllClose(_rate(config, step, global_batch_size=256), rate)

    def test_schedule_round_trips_through_its_config(self):
        schedule = optim.learning_rate_schedule(
            OptimizerConfig(warmup_epochs=1, lr_schedule="cosine"), 512, _STEPS_PER_EPOCH, _EPOCHS
        )
        copy = optim.WarmupSchedule.from_config(schedule.get_config())
        self.assertAllClose(copy(17), schedule(17))


class BuildOptimizerTest(TfTestCase, parameterized.TestCase):
    @parameterized.parameters(
        ("sgd", tf_keras.optimizers.SGD),
        ("momentum", tf_keras.optimizers.SGD),
        ("nesterov", tf_keras.optimizers.SGD),
        ("adam", tf_keras.optimizers.Adam),
        ("adamw", tf_keras.optimizers.AdamW),
        ("rmsprop", tf_keras.optimizers.RMSprop),
        ("lars", optim.LARS),
    )
    def test_every_optimizer_builds_with_the_schedule(self, name, optimizer_class):
        config = OptimizerConfig(
            optimizer=name, learning_rate=0.1, weight_decay=1e-4, warmup_epochs=1
        )
        optimizer = optim.build_optimizer(
            config,
            update_batch_size=256,
            updates_per_epoch=_STEPS_PER_EPOCH,
            epochs=_EPOCHS,
            transforms=GradientTransforms(),
        )
        self.assertIsInstance(optimizer, optimizer_class)
        variable = tf.Variable([1.0, 2.0])
        optimizer.apply_gradients([(tf.constant([0.5, 0.5]), variable)])
        self.assertNotAllClose(variable.numpy(), [1.0, 2.0])

    def test_nesterov_and_momentum_use_the_momentum_flag(self):
        config = OptimizerConfig(optimizer="nesterov", momentum=0.8)
        optimizer = optim.build_optimizer(
            config,
            update_batch_size=256,
            updates_per_epoch=_STEPS_PER_EPOCH,
            epochs=_EPOCHS,
            transforms=GradientTransforms(),
        )
        self.assertEqual((optimizer.momentum, optimizer.nesterov), (0.8, True))

    def test_accumulation_schedules_updates_on_the_effective_batch(self):
        config = OptimizerConfig(
            learning_rate=0.1, lr_scaling="linear", warmup_epochs=1, grad_accum_steps=2
        )
        plan = tfdist.setup(
            RunConfig(
                input=InputConfig(dataset="synthetic", global_batch_size=256, num_classes=2),
                optimizer=config,
                train=TrainConfig(epochs=_EPOCHS, steps_per_epoch=10),
            )
        )
        self.assertEqual((plan.update_batch_size, plan.updates_per_epoch), (512, 5))
        schedule = keras2_train.tfdist_optimizer(plan)._learning_rate  # pylint: disable=protected-access
        # 2 micro-batches of 256 per update: peak 0.2; 10 steps an epoch are 5 updates.
        self.assertEqual((schedule.peak, schedule.warmup_steps), (0.2, 5))


class OptimizerConfigTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("unknown_optimizer", dict(optimizer="lamb"), r"optimizer='lamb'.*lars"),
        ("zero_rate", dict(learning_rate=0.0), r"learning_rate=0.0 must be positive"),
        ("negative_noise", dict(gradient_noise_eta=-0.1), r"gradient_noise_eta=-0.1"),
        ("negative_gamma", dict(gradient_noise_gamma=-1), r"gradient_noise_gamma=-1"),
        ("negative_warmup", dict(warmup_epochs=-1), r"warmup_epochs=-1"),
        (
            "boundaries_not_increasing",
            dict(lr_schedule="step", lr_step_boundaries=(2, 2)),
            r"2,2 are not increasing",
        ),
        (
            "boundary_in_warmup",
            dict(lr_schedule="step", lr_step_boundaries=(1, 4), warmup_epochs=2),
            r"must fall after warmup",
        ),
        ("boundaries_without_step", dict(lr_step_boundaries=(1,)), r"applies to lr_schedule"),
        (
            "lars_mode_with_sgd",
            dict(optimizer="sgd", lars_mode="clip"),
            r"lars_mode applies to optimizer=lars, not sgd",
        ),
        ("lars_exclude_with_adam", dict(lars_exclude=("kernel",)), r"lars_exclude applies"),
        ("zero_eeta", dict(optimizer="lars", lars_eeta=0.0), r"lars_eeta=0.0 must be positive"),
        ("zero_accumulation", dict(grad_accum_steps=0), r"grad_accum_steps=0"),
        ("zero_clip", dict(clip_norm=0.0), r"clip_norm=0.0 must be positive"),
        ("step_factor_above_one", dict(lr_step_factor=2.0), r"lr_step_factor=2.0"),
        (
            "infinite_rate",
            dict(learning_rate=float("inf")),
            r"learning_rate=inf is not a finite number .*e\.g\. 0\.1",
        ),
        (
            "rate_beyond_float32",
            dict(learning_rate=1e39),
            r"learning_rate=1e\+39 is not a finite number \(within float32",
        ),
        ("nan_weight_decay", dict(weight_decay=float("nan")), r"weight_decay=nan is not a finite"),
        ("infinite_clip", dict(clip_norm=float("inf")), r"clip_norm=inf is not a finite"),
        ("infinite_eeta", dict(optimizer="lars", lars_eeta=float("inf")), r"lars_eeta=inf"),
        ("nan_gamma", dict(gradient_noise_gamma=float("nan")), r"gradient_noise_gamma=nan"),
        ("nan_warmup", dict(warmup_epochs=float("nan")), r"warmup_epochs=nan is not a finite"),
        (
            "nan_boundary",
            dict(lr_schedule="step", lr_step_boundaries=(1, float("nan"))),
            r"lr_step_boundaries\[1\]=nan is not a finite",
        ),
        (
            "huge_accumulation",
            dict(grad_accum_steps=2**40),
            r"grad_accum_steps=1099511627776 "
            r"is not an integer from 1 to",
        ),
        ("huge_base_batch", dict(base_batch_size=2**40), r"base_batch_size=1099511627776"),
        (
            "unclosed_regex",
            dict(optimizer="lars", lars_exclude=("[unclosed",)),
            r"lars_exclude='\[unclosed' is not a regular expression \(unterminated character set",
        ),
    )
    def test_rejects(self, kwargs, message):
        with self.assertRaisesRegex(ConfigError, message) as raised:
            OptimizerConfig(**kwargs)
        self.assertNotIn("\n", str(raised.exception))

    @parameterized.named_parameters(
        (
            "warmup_too_long",
            dict(warmup_epochs=3.5),
            r"warmup_epochs=3.5 is not shorter than "
            r"training \(epochs=3\)",
        ),
        (
            "boundary_after_training",
            dict(lr_schedule="step", lr_step_boundaries=(1, 4)),
            r"lr_step_boundaries=1,4 must fall before the end of training \(epochs=3\)",
        ),
    )
    def test_the_schedule_must_fit_in_training(self, kwargs, message):
        with self.assertRaisesRegex(ConfigError, message):
            RunConfig(train=TrainConfig(epochs=3), optimizer=OptimizerConfig(**kwargs))

    def test_scaled_rate_beyond_float32(self):
        config = OptimizerConfig(learning_rate=1e35, lr_scaling="linear")
        with self.assertRaisesRegex(
            ConfigError,
            r"learning_rate=1e\+35 scaled linear "
            r"to global_batch_size=16777216 is ",
        ):
            check_peak_learning_rate(config, 1 << 24)
