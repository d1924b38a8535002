"""The optimizer recipe (`recipe`: rate scaling, warmup, decay; `lars`) and what happens to the
gradients before each update (`gradient_path`, written once for every Keras and loop;
`noise_scale`). Imports the run's configs (`runtime`) and nothing above."""
