"""Preprocessing placement: device ops land on each replica's device, and host and device give
the same distribution of inputs."""

import contextlib
import io

import numpy as np
import tensorflow as tf
import tf_keras
from absl.testing import parameterized
from tensorflow.python.framework import kernels

from tfdist import input_pipelines
from tfdist.input_pipelines import InputConfig
from tfdist.input_pipelines import Placement
from tfdist.input_pipelines import PreprocessOn
from tfdist.input_pipelines import preprocessing
from tfdist.input_pipelines.choices import Augment
from tests.tf_test_case import TfTestCase

_NUM_IMAGES = 4096


def _images(num_images: int = _NUM_IMAGES) -> tf.Tensor:
    """Half-dark, half-bright images with a vertical edge, so crops and flips change them."""
    columns = tf.cast(tf.range(32) >= 12, tf.float32)[None, None, :, None]
    noise = tf.random.stateless_uniform([num_images, 32, 32, 3], seed=[1, 2], maxval=40)
    return tf.cast(40 + 160 * columns + noise, tf.uint8)


def _histogram_distance(first: np.ndarray, second: np.ndarray) -> float:
    def histogram(values):
        return np.histogram(values, bins=20, range=(-1, 1))[0] / values.size

    return float(np.abs(histogram(first) - histogram(second)).sum() / 2)


def _ops_without_gpu_kernel(graph: tf.Graph, scope: str) -> list[str]:
    """`type(dtypes)` of each op under SCOPE that TensorFlow has no GPU kernel for: on a GPU
    such an op runs on the host, with a copy of its inputs there and of its outputs back.
    DEFAULT kernels (int32 index arithmetic, in host memory) serve every device."""
    missing = []
    for op in graph.get_operations():
        if scope not in op.name:
            continue
        gpu_kernels = [
            kernel
            for kernel in kernels.get_registered_kernels_for_op(op.type).kernel
            if kernel.device_type in ("GPU", "DEFAULT")
        ]
        if not any(
            all(
                op.get_attr(constraint.name).as_datatype_enum in constraint.allowed_values.list.type
                for constraint in kernel.constraint
            )
            for kernel in gpu_kernels
        ):
            missing.append(f"{op.type}({', '.join(str(t.dtype.name) for t in op.inputs)})")
    return sorted(set(missing))


def _resolved(preprocess_on: str, num_gpus: int) -> tuple[PreprocessOn, str]:
    """The placement `resolve_placement` picks, and what it logged."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        placement = input_pipelines.resolve_placement(
            InputConfig(preprocess_on=preprocess_on), num_gpus=num_gpus
        )
    return placement.preprocess_on, stderr.getvalue()


class PlacementTest(TfTestCase, parameterized.TestCase):
    def test_auto_is_device_with_gpus_else_host(self):
        config = InputConfig()
        self.assertEqual(
            input_pipelines.resolve_placement(config, num_gpus=2).preprocess_on, PreprocessOn.DEVICE
        )
        self.assertEqual(
            input_pipelines.resolve_placement(config, num_gpus=0).preprocess_on, PreprocessOn.HOST
        )

    def test_device_without_gpus_is_kept_with_one_warning_line(self):
        placement, logged = _resolved("device", num_gpus=0)
        self.assertIs(placement, PreprocessOn.DEVICE)
        self.assertRegex(
            logged,
            r"^tfdist input: --preprocess_on=device with no GPU replicas: "
            r"augmentation and normalisation run inside each training step "
            r"on the CPU, without XLA, 0.6-1.0 ms of CPU per 224x224 image "
            r"against 0.06-0.13 ms on the host \(measured on 2 cores\); use "
            r"--preprocess_on=host, or auto \(device only with GPUs\)\n$",
        )

    @parameterized.parameters(("device", 1), ("auto", 0), ("auto", 2), ("host", 0))
    def test_no_warning_otherwise(self, preprocess_on, num_gpus):
        self.assertEqual(_resolved(preprocess_on, num_gpus)[1], "")

    def test_bytes_per_example_per_mode(self):
        shape = (32, 32, 3)
        self.assertEqual(Placement(PreprocessOn.DEVICE).bytes_per_example(shape), 3072 + 8)
        self.assertEqual(Placement(PreprocessOn.HOST).bytes_per_example(shape), 4 * 3072 + 8)
        self.assertEqual(
            Placement(PreprocessOn.HOST, "bfloat16").bytes_per_example(shape), 2 * 3072 + 8
        )
        self.assertIn(
            "3,080 bytes/example host->device", Placement(PreprocessOn.DEVICE).describe(shape)
        )

    def test_device_preprocessing_runs_on_each_replicas_device(self):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            layer = input_pipelines.device_preprocessing()

        @tf.function
        def step(images):
            return strategy.run(lambda batch: layer(batch, training=True), args=(images,))

        graph = step.get_concrete_function(tf.TensorSpec([8, 32, 32, 3], tf.uint8)).graph
        devices = {}
        for op in graph.get_operations():
            if "device_preprocessing" in op.name and op.type in ("GatherV2", "RandomUniform"):
                devices.setdefault(op.device.split("device:")[-1], []).append(op.name)
        self.assertCountEqual(devices, ["CPU:0", "CPU:1"])
        replica_1_ops = " ".join(devices["CPU:1"])
        self.assertIn("replica_1", replica_1_ops)

    @parameterized.parameters(Augment.SMALL, Augment.IMAGENET)
    def test_every_device_preprocessing_op_has_a_gpu_kernel(self, augmentation):
        # Found on an H200 (docs/PERFORMANCE.md): GatherV2 has no GPU kernel for uint8, so
        # the crop and flip ran on the host and device preprocessing was slower than host.
        for dtype in ("float32", "mixed_float16", "mixed_bfloat16"):
            layer = preprocessing.DevicePreprocessing(
                name="device_preprocessing",
                dtype=tf_keras.mixed_precision.Policy(dtype),
                augmentation=augmentation,
            )
            step = tf.function(lambda batch, layer=layer: layer(batch, training=True))
            graph = step.get_concrete_function(tf.TensorSpec([8, 32, 32, 3], tf.uint8)).graph
            self.assertEqual(_ops_without_gpu_kernel(graph, "device_preprocessing"), [], dtype)

    def test_host_and_device_give_the_same_distribution(self):
        images = _images()
        host = (
            tf.data.Dataset.from_tensor_slices(images)
            .batch(256)
            .map(
                lambda batch: preprocessing.preprocess_on_host(
                    batch, training=True, compute_dtype="float32"
                )
            )
        )
        host = np.concatenate(list(host.as_numpy_iterator()))
        layer = input_pipelines.device_preprocessing()
        device = np.concatenate(
            [layer(batch, training=True).numpy() for batch in tf.split(images, 16)]
        )
        for name, statistic in (("mean", np.mean), ("std", np.std)):
            self.assertAllClose(
                statistic(host, axis=(0, 1)), statistic(device, axis=(0, 1)), atol=0.05, msg=name
            )
        # Total variation distance of pixel histograms: small between the placements, large
        # between either and the unaugmented images (so the check can tell them apart).
        plain = preprocessing.normalise(images, "float32").numpy()
        self.assertLess(_histogram_distance(host, device), 0.05)
        self.assertGreater(_histogram_distance(host, plain), 0.2)

    def test_without_training_both_only_normalise(self):
        images = _images(64)
        expected = tf.cast(images, tf.float32) / 127.5 - 1
        self.assertAllClose(
            preprocessing.preprocess(images, training=False, compute_dtype="float32"), expected
        )
        self.assertAllClose(
            input_pipelines.device_preprocessing()(images, training=False), expected
        )

    def test_device_layer_casts_to_the_policy_dtype(self):
        layer = preprocessing.DevicePreprocessing(
            dtype=tf_keras.mixed_precision.Policy("mixed_bfloat16")
        )
        self.assertEqual(layer(_images(4), training=True).dtype, tf.bfloat16)

    def test_augmented_images_are_crops_of_the_mirrored_original(self):
        images = _images(256)
        augmented = preprocessing.augment(images).numpy()
        self.assertEqual(augmented.shape, (256, 32, 32, 3))
        self.assertAllInRange(augmented, 0.0, 255.0)
        # The bright region starts at column 12. Shifted by up to 4 columns it still starts
        # within 8..16; flipped, it ends within 16..24 and the image starts bright.
        bright = augmented.mean(axis=(1, 3)) > augmented.mean(axis=(1, 2, 3))[:, None]
        flipped = bright[:, 0] & ~bright[:, -1]
        self.assertTrue(np.all(flipped | (bright[:, -1] & ~bright[:, 0])))
        self.assertBetween(flipped.mean(), 0.35, 0.65)
        edges = np.where(flipped, 32 - bright[:, ::-1].argmax(axis=1), bright.argmax(axis=1))
        self.assertAllInRange(np.where(flipped, edges, 0), 0, 24)
        self.assertAllInRange(edges, 8, 24)
        self.assertGreater(len(np.unique(edges)), 5)

    def test_host_augmentation_draws_anew_for_every_batch(self):
        images = _images(16)
        batches = list(
            tf.data.Dataset.from_tensors(images)
            .repeat(3)
            .map(
                lambda batch: preprocessing.preprocess_on_host(
                    batch, training=True, compute_dtype="float32"
                )
            )
        )
        self.assertNotAllClose(batches[0], batches[1])
        self.assertNotAllClose(batches[1], batches[2])


class ImagenetOnDeviceTest(TfTestCase):
    """With augment=imagenet the host crops in the decode: the device flips and normalises."""

    def test_device_layer_only_flips_and_normalises(self):
        images = _images(256)
        layer = preprocessing.DevicePreprocessing(augmentation="imagenet")
        out = layer(images, training=True).numpy()
        plain = preprocessing.normalise(images, "float32").numpy()
        mirrored = plain[:, :, ::-1]
        same = np.all(np.isclose(out, plain), axis=(1, 2, 3))
        flipped = np.all(np.isclose(out, mirrored), axis=(1, 2, 3))
        self.assertTrue(np.all(same | flipped))
        self.assertBetween(flipped.mean(), 0.35, 0.65)
        self.assertAllClose(layer(images, training=False), plain)

    def test_host_and_device_flip_alike(self):
        images = _images(512)
        host = preprocessing.preprocess_on_host(
            images, training=True, compute_dtype="float32", augmentation=Augment.IMAGENET
        ).numpy()
        flipped = np.isclose(
            host[:, 0, 0, 0], preprocessing.normalise(images[:, 0, -1, 0], "float32").numpy()
        )
        self.assertBetween(flipped.mean(), 0.35, 0.65)

    def test_none_only_normalises(self):
        images = _images(8)
        self.assertAllClose(
            preprocessing.preprocess(
                images, training=True, compute_dtype="float32", augmentation=Augment.NONE
            ),
            preprocessing.normalise(images, "float32"),
        )

    def test_the_layer_keeps_its_recipe_in_its_config(self):
        layer = preprocessing.DevicePreprocessing(augmentation=Augment.IMAGENET)
        self.assertEqual(layer.get_config()["augmentation"], "imagenet")
        self.assertIs(
            preprocessing.DevicePreprocessing.from_config(layer.get_config()).augmentation,
            Augment.IMAGENET,
        )
        with self.assertRaisesRegex(ValueError, r"augmentation=auto is resolved by the input"):
            preprocessing.DevicePreprocessing(augmentation="auto")
