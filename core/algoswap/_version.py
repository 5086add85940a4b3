"""Versions: the distribution's, and the plugin API's (what plugins declare a range of)."""

__version__ = "0.1.0"
API_VERSION = "1.2"  # 1.1: add_family, add_backend(reference=), the dtype sets and FAMILIES; 1.2: the comm family
