"""What crosses machines: launcher, network isolation, probes, liveness, manifests, cost model."""
