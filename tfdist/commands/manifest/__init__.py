"""`tfdist manifest`: the command (`command`) and the flags of its Slurm batch script
(`slurm_flags`)."""
