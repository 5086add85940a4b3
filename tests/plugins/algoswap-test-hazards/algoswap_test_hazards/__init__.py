"""Throwaway algoswap plugins that misbehave; each submodule is one plugin (entry point
``hazard_<name>``, backend ``hazard_<name>`` with relu "direct", preferred over numpy) that does its
harm at the stage ``ALGOSWAP_TEST_HAZARD_STAGE`` names: "import" (the default), "registration",
"probe" or "supports". Used only in child processes (tests/plugin_system/test_hazards.py)."""

import os


def install(module_globals, harm):
    """Give the plugin module its hooks, and do the harm now if the stage is "import"."""
    if os.environ.get("ALGOSWAP_TEST_IMPORT_LOG"):  # tests prove a plugin is (or is not) imported
        with open(os.environ["ALGOSWAP_TEST_IMPORT_LOG"], "a") as log:
            log.write(module_globals["__name__"] + "\n")
    backend = "hazard_" + module_globals["__name__"].rsplit(".", 1)[1]
    stage = os.environ.get("ALGOSWAP_TEST_HAZARD_STAGE", "import")

    def at(now):
        if now == stage:
            harm()

    def probe():
        at("probe")
        return True

    def supports(call):
        at("supports")
        return True

    def relu(x):
        import numpy

        return numpy.maximum(x, 0)

    def algoswap_register(registry):
        at("registration")
        registry.add_backend(backend, probe=probe, priority=50)
        registry.add_implementation("relu", "direct", backend, relu, supports=supports)

    module_globals.update(algoswap_api_version=lambda: ">=1,<2", algoswap_register=algoswap_register)
    at("import")
