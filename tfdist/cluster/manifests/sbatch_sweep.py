"""A sweep as a Slurm job array: one array task per combination of flag values (every `--sweep`
flag against every other: a grid), or an `--array` of one command; each array task trains in a
model dir of its own."""

from __future__ import annotations

import dataclasses
import itertools
import re

from tfdist.cluster.manifests import checks

MAX_ARRAY_INDEX = 1000  # Slurm's default MaxArraySize is 1001: indexes 0 to 1000.
# The flags the script sets in each array task, which a sweep cannot vary.
SET_PER_TASK = ("model_dir", "metrics_json")
_FLAG_RE = re.compile(r"[a-z][a-z0-9_]*", re.ASCII)
_RANGE_RE = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?", re.ASCII)
_THROTTLE_RE = re.compile(r"[1-9][0-9]{0,6}", re.ASCII)

Grid = tuple[tuple[str, tuple[str, ...]], ...]


def parse_grid(entries) -> Grid:
    """`--slurm_sweep` entries, each `flag=v1,v2,...`, as ((flag, values), ...).

    Raises:
      ManifestError: an entry is not flag=values, repeats a flag or a value, or names a flag
        the script sets in each array task.
    """
    grid = []
    for entry in entries:
        flag, equals, values = entry.partition("=") if isinstance(entry, str) else ("", "", "")
        flag = flag.removeprefix("--")
        checks.require(
            bool(equals) and bool(_FLAG_RE.fullmatch(flag)) and bool(values),
            "slurm_sweep",
            entry,
            "write FLAG=V1,V2,..., e.g. --slurm_sweep=learning_rate=0.1,0.3",
            problem="is not flag=values",
        )
        grid.append((flag, tuple(values.split(","))))
    return tuple(grid)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A job array.

    Attributes:
      grid: ((flag, values), ...): the array has one task per combination, in the order of
        itertools.product (the last flag varies fastest); () runs one command in every task.
      array: Slurm's `--array` spec, e.g. "0-7%2" (at most 2 at once) or "1,3" (those again);
        None: every combination of the grid (0 to N-1). With a grid, its indexes name
        combinations.
    """

    grid: Grid = ()
    array: str | None = None

    def __post_init__(self):
        flags = [flag for flag, _ in self.grid]
        for flag, values in self.grid:
            checks.require(
                flag not in SET_PER_TASK,
                "slurm_sweep",
                flag,
                "sweep other flags: the script gives each array task its own --model_dir "
                "(under yours) and --metrics_json",
                problem="is set by the script in each array task",
            )
            checks.require(
                flags.count(flag) == 1 and len(set(values)) == len(values) and all(values),
                "slurm_sweep",
                f"{flag}={','.join(values)}",
                "give each flag once, with distinct, non-empty values",
                problem="repeats a flag or a value",
            )
        checks.require(
            bool(self.grid) or self.array is not None,
            "slurm_array",
            self.array,
            "pass --slurm_array=SPEC or --slurm_sweep=FLAG=V1,V2",
            problem="is unset and there is no sweep",
        )
        checks.require(
            self.count <= MAX_ARRAY_INDEX + 1,
            "slurm_sweep",
            self.count,
            f"sweep at most {MAX_ARRAY_INDEX + 1} combinations (Slurm's MaxArraySize)",
            problem="combinations are too many",
        )
        if self.array is not None:
            highest = _highest_index(self.array)
            checks.require(
                not self.grid or highest < self.count,
                "slurm_array",
                self.array,
                f"use indexes from 0 to {self.count - 1}, one per combination of the sweep",
                problem=f"names index {highest}, past the sweep's {self.count} combinations",
            )

    @property
    def count(self) -> int:
        """The grid's combinations (1 without a grid)."""
        return len(list(itertools.product(*(values for _, values in self.grid))))

    @property
    def spec(self) -> str:
        """The `#SBATCH --array` spec."""
        return self.array if self.array is not None else f"0-{self.count - 1}"

    def runs(self) -> list[dict[str, str]]:
        """Each combination, by array index: {flag: value}."""
        names = [flag for flag, _ in self.grid]
        return [
            dict(zip(names, values))
            for values in itertools.product(*(values for _, values in self.grid))
        ]


def _highest_index(spec) -> int:
    """The highest index of Slurm `--array` spec `spec` ("0-9:2,15%4").

    Raises:
      ManifestError: not a spec, or an index past MAX_ARRAY_INDEX.
    """
    ranges, _, throttle = spec.partition("%") if isinstance(spec, str) else ("", "", "")
    matches = [_RANGE_RE.fullmatch(part) for part in ranges.split(",")]
    ok = all(matches) and (not throttle or bool(_THROTTLE_RE.fullmatch(throttle)))
    ok = ok and ("%" not in spec or bool(throttle))
    highest = -1
    for match in matches if ok else ():
        first, last, step = match.groups()
        last = int(last) if last is not None else int(first)
        ok = ok and int(first) <= last and (step is None or int(step) > 0)
        highest = max(highest, last)
    checks.require(
        ok and 0 <= highest <= MAX_ARRAY_INDEX,
        "slurm_array",
        spec,
        f"write Slurm's --array, e.g. 0-7, 0-7%2 or 1,3, with indexes up to {MAX_ARRAY_INDEX}",
        problem="is not an array spec",
    )
    return highest
