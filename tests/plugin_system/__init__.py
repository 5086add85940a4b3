"""Tests of the plugin system (a package, so its modules import their conftest unambiguously)."""
