"""Ends the process at once, as os._exit does: no exception, no clean-up, no message."""

import os

from . import install

install(globals(), lambda: os._exit(3))
