"""How long a supervisor waits before restarting a failed task: a back-off that doubles with
each restart up to MAX_DELAY_S, and what it can add up to. Pure Python."""

MAX_DELAY_S = 30.0


def delay(first_s: float, restarts: int) -> float:
    """The wait before restart number `restarts` (1 for the first): `first_s`, doubled each
    time, at most MAX_DELAY_S."""
    return min(first_s * 2.0 ** min(restarts - 1, 32), MAX_DELAY_S)


def bound(first_s: float, max_restarts: int, *, timed: bool) -> str:
    """What the back-off of `max_restarts` restarts can add up to, as the end of the first
    restart's line ("" when there is nothing to add); `timed`: a time limit bounds the job."""
    total = sum(delay(first_s, number) for number in range(1, max_restarts + 1))
    if max_restarts < 2 or not total:
        return ""
    return (
        f" (the back-off doubles up to {MAX_DELAY_S:g} s: at most {total:,.0f} s over "
        f"{max_restarts} restarts{'' if timed else '; --timeout_s=S bounds the whole job'})"
    )
