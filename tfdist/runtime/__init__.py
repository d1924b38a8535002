"""One run's set-up: configs, `setup` and its Plan, Keras flavour, precision, paths, plug-ins."""
