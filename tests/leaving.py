"""A process's exit at a preemption notice, as in-process tests see it: `Left` instead of
`os._exit` (tests/conftest.py puts `fake_leave_now` in place of `notice.leave_now` for every
test), so that a notice a test sends before or after training ends the test, not pytest."""


class Left(BaseException):
    """The process would have left with `status` (a BaseException: code that catches Exception
    does not stop it, as nothing stops os._exit)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def fake_leave_now(status: int) -> None:
    raise Left(status)
