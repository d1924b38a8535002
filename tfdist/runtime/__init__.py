"""One run's set-up: the configs (`config`), `setup` and the frozen Plan every other room reads
(`setup`), the Keras flavour (`keras_env`, `keras_flavour`), precision, the paths a run checks
(`paths`) and the model dir's layout and lock (`model_dir`), users' MODULE:FUNCTION plug-ins and
TensorFlow's import. Imports `cluster` (the join deadline) and the libraries."""
