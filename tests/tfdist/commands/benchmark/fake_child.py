"""A stand-in for `tfdist.commands.benchmark.child` that speaks its protocol without TensorFlow, for
`test_rounds`. Its spec: {"train_args": [NAME], "log": PATH, "fail_on_round": K,
"hang_on_round": K, "refused": LINE}; each round appends `NAME PID` to the log and replies with
its number (the round it hangs on, it appends that line and stays silent); with "refused" it
refuses the configuration in that line, as `tfdist train` would."""

import json
import os
import sys
import time

spec = json.loads(sys.argv[1])
name = spec["train_args"][0]
if "refused" in spec:
    print(json.dumps({"refused": spec["refused"], "exit_status": 2}), flush=True)
    sys.exit()
print(json.dumps({"global_batch_size": 8, "name": name}), flush=True)
for number, line in enumerate(sys.stdin, 1):
    if number == spec.get("fail_on_round"):
        sys.exit(f"{name}: failed on purpose in round {number}")
    with open(spec["log"], "a", encoding="utf-8") as log:
        log.write(f"{name} {os.getpid()}\n")
    if number == spec.get("hang_on_round"):
        time.sleep(600)
    print(json.dumps({"tfdist": [float(number)], "trainable_parameters": 7}), flush=True)
