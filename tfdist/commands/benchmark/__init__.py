"""`tfdist benchmark`: the sweep, its rounds and one configuration's process."""
