"""Training: `fit` (roles, the Keras flavour's seam, the run summary) and the parts both Kerases
share (`data`, `model`, `guards`, `callbacks`, built-in `models`, `summary`, `ps_task`,
`from_config`); `keras2` and `keras3` train each flavour and import the shared parts, never the
reverse."""
