"""`tfdist plan`: the cost planner (its command, and the workload and advice it prints)."""
