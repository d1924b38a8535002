"""How fast tfdist copies a supervised process's output (`tfdist launch`'s tasks, `tfdist
rehearse`'s pods) against the same process with a plain reader, in the same run, in turns:

    python scripts/cluster/benchmark_log_pump.py [--lines=N] [--rounds=R] [--no-flush] \\
        | cat > /dev/null

The process prints N numbered lines as fast as Python can: `print(..., flush=True)`, one write
per line (the worst case for a copier), or block-buffered with --no-flush. Baseline: the same
program printing into /dev/null, as fast as it can print at all. Measured:
`tfdist.cluster.processes.Process` copying every line, prefixed, to our stdout (a pipe, as to a
terminal or a CI log) and to a log file; and, for scale, `wc -c` draining the program's pipe.
Prints, per round and as medians, each side's MB/s and its time over the baseline's.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from tfdist.cluster import processes


def _program(lines: int, flush: bool) -> list[str]:
    return [
        sys.executable,
        "-c",
        f"for i in range({lines}): print('step', i, 'loss 0.123456', flush={flush})",
    ]


def _into_dev_null(program: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(program, stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - start


def _plain_reader(program: list[str]) -> tuple[float, int]:
    start = time.monotonic()
    with subprocess.Popen(program, stdout=subprocess.PIPE) as producer:
        drained = subprocess.run(
            ["wc", "-c"], stdin=producer.stdout, capture_output=True, check=True, text=True
        )
    return time.monotonic() - start, int(drained.stdout)


def _copied(program: list[str], scratch: str) -> tuple[float, int]:
    log_path = os.path.join(scratch, "task.log")
    if os.path.exists(log_path):
        os.remove(log_path)
    task = processes.Process(
        "task", program, dict(os.environ), log_path, threading.Lock(), announcer="benchmark"
    )
    start = time.monotonic()
    task.start()
    task.process.wait()
    task.wait_ended(time.monotonic() + 600)
    return time.monotonic() - start, os.path.getsize(log_path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-flush", dest="flush", action="store_false")
    args = parser.parse_args()
    if args.lines < 1 or args.rounds < 1:
        parser.error("--lines and --rounds take positive counts")
    program = _program(args.lines, args.flush)
    sides = ("into /dev/null", "wc -c", "tfdist copy")
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.rounds):
            seconds["into /dev/null"].append(_into_dev_null(program))
            plain_s, size = _plain_reader(program)
            seconds["wc -c"].append(plain_s)
            copy_s, logged = _copied(program, scratch)
            seconds["tfdist copy"].append(copy_s)
            if logged != size:
                sys.exit(f"the copy logged {logged} bytes of {size}")
            print(
                f"round {number + 1}: {size / 1e6:.1f} MB; "
                + ", ".join(f"{side} {times[-1]:.2f} s" for side, times in seconds.items()),
                file=sys.stderr,
            )
    base = seconds["into /dev/null"]
    print(
        f"{args.lines} lines ({size / 1e6:.1f} MB) "
        f"{'flushed one by one' if args.flush else 'block-buffered'}, medians of "
        f"{args.rounds}: "
        + "; ".join(
            f"{side} {size / 1e6 / statistics.median(times):.1f} MB/s, "
            f"{statistics.median(t / b for t, b in zip(times, base)):.2f}x"
            for side, times in seconds.items()
        ),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
