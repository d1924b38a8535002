"""The core configs' fields: `option` and `fix_of` from the strategies library (a field that
carries its `tfdist train` flag's default, help and bounds once), and the bounds of counts and
float32 values."""

from tfdist.strategies.config import fix_of  # noqa: F401
from tfdist.strategies.config import option  # noqa: F401

MAX_COUNT = (1 << 31) - 1  # Steps, epochs and other counts TensorFlow keeps in int32 or more.
MAX_FLOAT32 = 3.4028234663852886e38  # Floats TensorFlow computes in float32 stay below it.
