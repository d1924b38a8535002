"""Training: fit, CustomLoop, callbacks, guards, evaluator, ps task, built-in models, summary."""
