"""TensorFlow on the GPU in half a minute: the CUDA it was built for, the GPUs it sees, float32
and float16 matmul rates, one convolution through cuDNN.

    TF_CPP_MIN_LOG_LEVEL=0 python scripts/gpu_machine/smoke.py
"""

import time

import tensorflow as tf

_SIZE = 8192
_REPEATS = 10


def _matmul_tflops(dtype: tf.DType) -> float:
    a = tf.random.normal([_SIZE, _SIZE], dtype=dtype)
    tf.matmul(a, a).numpy()  # Warm-up: kernel choice and the first launch.
    started = time.perf_counter()
    for _ in range(_REPEATS):
        product = tf.matmul(a, a)
    product.numpy()
    return 2 * _SIZE**3 * _REPEATS / (time.perf_counter() - started) / 1e12


def main() -> None:
    build = tf.sysconfig.get_build_info()
    print(
        "tensorflow",
        tf.__version__,
        "built for CUDA",
        build.get("cuda_version"),
        "cuDNN",
        build.get("cudnn_version"),
    )
    gpus = tf.config.list_physical_devices("GPU")
    print("gpus", gpus)
    if not gpus:
        return
    with tf.device("/GPU:0"):
        for dtype in (tf.float32, tf.float16):
            print(f"{dtype.name} matmul {_SIZE}^3: {_matmul_tflops(dtype):.1f} TFLOP/s")
        images = tf.random.normal([64, 224, 224, 3])
        output = tf.nn.conv2d(images, tf.random.normal([7, 7, 3, 64]), 2, "SAME")
        print("conv2d", output.shape, "on", output.device)


if __name__ == "__main__":
    main()
