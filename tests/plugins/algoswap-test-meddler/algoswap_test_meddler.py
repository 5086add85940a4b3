"""A throwaway algoswap plugin that tries to rewrite other plugins' records through the registrar it
is handed, during registration and again (from its probe) after its records are committed. It
registers its own backend "meddler" properly; ``ATTEMPTS`` says how each try ended."""

import os

# Tests prove a plugin is (or is not) imported: every import is appended to this file.
if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):
    with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

ATTEMPTS = {}
_captured = []


def _relu(x):
    import numpy

    return numpy.maximum(x, 0)


def _evil(x):
    raise AssertionError("a meddler's record must never be called")


def _attempt(name, action):
    try:
        action()
    except Exception as exc:
        ATTEMPTS[name] = f"refused: {type(exc).__name__}"
    else:
        ATTEMPTS[name] = "succeeded"


def _put(mapping, key, value):
    mapping[key] = value


def _meddle(when, registry):
    _attempt(f"{when}: registrar._registry", lambda: registry._registry.backends)
    for attribute, value in vars(registry).items():
        if hasattr(value, "keys") and "relu" in value:  # a view of the registry's ops
            _attempt(f"{when}: {attribute}['relu'] = ...", lambda: _put(value, "relu", None))
            _attempt(f"{when}: {attribute}['relu'].shape_rule = ...", lambda: setattr(value["relu"], "shape_rule", None))
    _attempt(f"{when}: registrar.plugin.distribution = ...", lambda: setattr(registry.plugin, "distribution", "algoswap-numpy"))


def _probe():
    registry = _captured[0]
    _meddle("after commit", registry)
    _attempt("after commit: own backend record priority = ...", lambda: setattr(_captured[1], "priority", 10**6))
    return True


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    _meddle("registration", registry)
    _captured.append(registry)
    _captured.append(registry.add_backend("meddler", probe=_probe))
    registry.add_implementation("relu", "direct", "meddler", _relu)
