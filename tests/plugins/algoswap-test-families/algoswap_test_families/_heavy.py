"""Stands in for a heavy library (CuPy, dpctl): registration and listings must never import it."""

from ._log import imported

imported(__name__)
