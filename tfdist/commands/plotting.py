"""matplotlib for `--plot`: an optional dependency (the `plot` extra)."""

from tfdist.runtime.config import ConfigError


def pyplot(path: str):
    """matplotlib's pyplot, drawing to files, for a plot to be written to `path`.

    Raises:
      ConfigError: matplotlib is not installed.
    """
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        from matplotlib import pyplot as module  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ConfigError(f"plot={path} needs matplotlib, which is not installed; install it "
                          "with `pip install -e '.[plot]'` or drop --plot.") from None
    return module
