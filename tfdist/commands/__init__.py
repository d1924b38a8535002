"""The command layer: argv, flags and one module per `tfdist` command."""
