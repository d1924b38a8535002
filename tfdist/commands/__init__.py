"""The command layer, the top floor: `cli` (the `tfdist` entry point) and one module per command,
each defining and reading its own absl flags (`flags` keeps the registry; `train_flags` the
flags users' programs take too, through `app`). The only room that reads absl flags; nothing
but tfdist's face imports it."""
