"""The end-of-run summary: what `fit` returns (the summary's fields, and the trained model), and
its one line on stdout (`runtime.output_files` writes its JSON)."""


class Summary(dict):
    """The run summary, as written to `--metrics_json` (its fields: docs/output.md), with the
    trained model as `model`, as Keras' `History` carries its model.

    Example:
      >>> summary = tfdist.fit(plan, build_model, train_dataset_fn, loss=..., metrics=[...])
      >>> summary["final"]["val_accuracy"], summary.model.save("model.keras")
    """

    def __init__(self, fields: dict, model=None):
        super().__init__(fields)
        self.model = model  # None on a serving or evaluating task.


def _shape(summary: dict) -> str:
    """Who trained: replicas in all, and over how many workers ("2 replicas x 2 workers"
    read as 4 when there were 2)."""
    replicas, workers = summary["num_replicas"], summary["num_workers"]
    if summary["strategy"] == "parameter_server":
        return f"{workers} worker(s), asynchronous, {replicas} replica(s) each"
    if workers == 1:
        return f"{replicas} replica(s)"
    return f"{replicas} replica(s) in all ({workers} workers x {replicas // workers})"


def format_line(summary: dict) -> str:
    """One human line: strategy and shape of the run, final metrics, speed."""
    final = summary["final"]
    metrics = ", ".join(
        f"{name}={final[name]:.4f}"
        for name in ("val_accuracy", "val_loss", "accuracy", "loss")
        if name in final
    )
    resumed = summary.get("resumed_from_epoch")
    attempt = f" (resumed at epoch {resumed + 1})" if resumed is not None else ""
    return (
        f"tfdist: {summary['strategy']} on {_shape(summary)}, {summary['epochs']} epoch(s) "
        f"of {summary['steps_per_epoch']} steps in {summary['wall_s']:.1f}s{attempt}: "
        f"{metrics}; {summary['examples_per_sec']:.0f} examples/s"
    )
