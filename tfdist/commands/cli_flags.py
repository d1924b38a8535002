"""The flags that several `tfdist` commands share and users' programs never see (`cli` imports
the command modules that define and read them; a user's program imports only the train flags)."""

from absl import flags

from tfdist.commands import flags as flags_lib

NUM_WORKERS = flags.DEFINE_integer(
    "num_workers", 2, "launch: worker tasks to start; manifest: worker tasks of the job; "
                      "data check: workers to simulate; data serve: tf.data service "
                      "workers to start.", lower_bound=1, upper_bound=flags_lib.MAX_TASKS)
EVALUATOR = flags.DEFINE_bool("evaluator", False,
                              "launch: start an evaluator task; manifest: add one.")
JSON = flags.DEFINE_string(
    "json", None, "data check, benchmark, plan: also write the report as JSON to this path.")
PLOT = flags.DEFINE_string(
    "plot", None, "benchmark: write a PNG of throughput and efficiency vs replicas; plan: of "
                  "efficiency and step time vs GPUs (needs matplotlib: pip install -e "
                  "'.[plot]').")
