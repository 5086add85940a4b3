"""Dereferences a null pointer (SIGSEGV)."""

import ctypes

from . import install

install(globals(), lambda: ctypes.string_at(0))
