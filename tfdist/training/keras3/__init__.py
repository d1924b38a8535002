"""What only Keras 3 models need: tfdist's own distributed step, optimizer and evaluator."""
