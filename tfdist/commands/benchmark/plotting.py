"""matplotlib for `--plot`: an optional dependency (the `plot` extra); the figure is written as
any output file is (`runtime.output_files`)."""

import io
import os

from tfdist.runtime import output_files
from tfdist.runtime.config import ConfigError


def pyplot(path: str):
    """matplotlib's pyplot, drawing to files, for a plot to be written to `path`; called before
    the work, so a missing matplotlib or an unknown format costs nothing.

    Raises:
      ConfigError: matplotlib is not installed, or it cannot write `path`'s format.
    """
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel

        matplotlib.use("Agg")
        from matplotlib import pyplot as module  # pylint: disable=import-outside-toplevel
        from matplotlib.backends import backend_agg  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ConfigError(
            f"plot={path} needs matplotlib, which is not installed; install it "
            "with `pip install -e '.[plot]'` or drop --plot."
        ) from None
    formats = backend_agg.FigureCanvasAgg.get_supported_filetypes()
    if _format(path) not in formats:
        raise ConfigError(
            f"plot={path!r}: matplotlib cannot write {_format(path)!r} files; end "
            f"the path in one of .{', .'.join(sorted(formats))}."
        )
    return module


def save(figure, path: str) -> None:
    """Writes `figure` to `path` in the format its extension names (PNG without one).

    Raises:
      OutputFileError: `path` cannot be written (see `output_files.write_bytes`).
    """
    image = io.BytesIO()
    figure.savefig(image, format=_format(path), dpi=120)
    output_files.write_bytes("plot", path, image.getvalue())


def _format(path: str) -> str:
    return os.path.splitext(path)[1][1:].lower() or "png"
