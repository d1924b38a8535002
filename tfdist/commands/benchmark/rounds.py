"""Rounds of `tfdist benchmark`'s configurations, interleaved: every configuration's process
(`tfdist.commands.benchmark.child`) stays alive for the whole sweep, and each round times every
configuration once, one after the other, starting one configuration later each round.

So the two sides of every ratio between configurations (scaling efficiency, input-bound ratio)
are timed minutes apart at most, within the same round, instead of one configuration's rounds
all before the other's: a shared machine whose speed drifts during a sweep moved those ratios
by 14-27% between two runs of the same sweep when configurations ran one after the other
(docs/PERFORMANCE.md). Only the configuration being timed works; the others wait for their
next request. Every configuration's model and data stay in memory for the whole sweep.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
from typing import Sequence

from tfdist.cluster import PYTHON
from tfdist import errors

CHILD_MODULE = "tfdist.commands.benchmark.child"
# The longest a child may take to start or to time one round.
_WAIT_S = 3600
# The longest a child may take to exit once its input is closed.
_EXIT_WAIT_S = 60


class _Child:
    """One configuration's process, spoken to one JSON line at a time."""

    def __init__(self, spec: dict, env: dict[str, str]):
        self._command = f"tfdist train {' '.join(spec['train_args'])}"
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._process = subprocess.Popen(
            [*PYTHON, "-m", CHILD_MODULE, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )

    def request(self) -> None:
        self._process.stdin.write("round\n")
        self._process.stdin.flush()

    def reply(self) -> dict:
        """The child's next message.

        Raises:
          UsageError: `tfdist train` refuses the configuration (the child's one line).
          RunFailure: it failed, or was silent for `_WAIT_S`.
        """
        ready, _, _ = select.select([self._process.stdout], [], [], _WAIT_S)
        line = self._process.stdout.readline() if ready else ""
        if line:
            message = json.loads(line)
            if "refused" not in message:
                return message
            error_class = errors.RunFailure if message["exit_status"] == 1 else errors.UsageError
            raise error_class(f"benchmark configuration `{self._command}`: {message['refused']}")
        if ready:  # Its output ended: it exited.
            self._process.wait(timeout=_EXIT_WAIT_S)
            why = f"failed: {self._last_error_line()}"
        else:
            why = f"gave no answer in {_WAIT_S:g} s"
        raise errors.RunFailure(f"benchmark configuration `{self._command}` {why}")

    def _last_error_line(self) -> str:
        self._stderr.seek(0)
        return (self._stderr.read().strip().splitlines() or ["(no output)"])[-1]

    def close_input(self) -> None:
        """Closes its input: a child waiting for a request exits."""
        try:
            self._process.stdin.close()
        except OSError:  # It has exited already.
            pass

    def wait(self) -> None:
        """Waits for it to exit after `close_input`; kills it if it does not (a child busy
        timing a round, when another failed)."""
        try:
            self._process.wait(timeout=_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()


def run(specs: Sequence[dict], env: dict[str, str], *, rounds: int) -> list[dict]:
    """Times `rounds` rounds of each configuration (its `tfdist.commands.benchmark.child` spec),
    interleaved; returns per configuration its description with each round's figures in a list
    under each key of `tfdist.commands.benchmark.child`'s round message (`trainable_parameters` and
    `noise_scale`: the last round's).

    Raises:
      RunFailure: a configuration failed or went silent (every child is stopped).
    """
    children = []
    try:
        for spec in specs:  # All start at once; the starts are not timed.
            children.append(_Child(spec, env))
        measured = [child.reply() for child in children]
        for number in range(rounds):
            order = [(number + offset) % len(children) for offset in range(len(children))]
            for index in order:
                children[index].request()
                for key, value in children[index].reply().items():
                    if key in ("trainable_parameters", "noise_scale"):
                        measured[index][key] = value
                    else:
                        measured[index].setdefault(key, []).append(value)
            print(
                f"tfdist benchmark: round {number + 1}/{rounds} done", file=sys.stderr, flush=True
            )
        return measured
    finally:
        for child in children:
            child.close_input()
        for child in children:
            child.wait()


def child_env(num_gpus: int) -> dict[str, str]:
    """The children's environment: this machine alone (no TF_CONFIG; the Keras flavour this
    process chose, in TF_USE_LEGACY_KERAS, stays), and on GPUs memory that grows as needed, so
    that every configuration's process fits on the GPUs at once (TensorFlow otherwise maps
    nearly all of a GPU's memory in the first process)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    if num_gpus:
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    return env
