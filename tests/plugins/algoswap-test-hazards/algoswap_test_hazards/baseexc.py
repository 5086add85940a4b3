"""Raises a BaseException subclass (neither an Exception nor SystemExit)."""

from . import install


class HazardError(BaseException):
    pass


def _raise():
    raise HazardError("a BaseException from a plugin")


install(globals(), _raise)
