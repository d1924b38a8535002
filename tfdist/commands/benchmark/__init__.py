"""`tfdist benchmark`: the command (`command`), its configurations' processes (`child`), timed in
interleaved rounds (`rounds`), and the figures, table and plot made of them (`figures`)."""
