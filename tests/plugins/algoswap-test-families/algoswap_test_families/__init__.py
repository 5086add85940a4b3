"""A throwaway algoswap plugin: backend "fam" registers the activation family from a module given by
name (which imports a "heavy library", like CuPy, at its top), plus two references that do not
resolve: an implementation whose name is mistyped and a kernel-name function that does not exist.

The family module has relu and relu_grad only: add_family reports the other activation ops missing
(and the backend lacks all of them but tanh, registered by its mistyped reference)."""

from algoswap import Ref

from ._log import imported

imported(__name__)
MISSING = None  # what add_family reported missing, for the tests


def algoswap_api_version():
    return ">=1,<2"


def algoswap_register(registry):
    global MISSING
    activation = f"{__name__}.activation"
    registry.add_backend("fam", priority=-100, description="test backend of one partial family")
    MISSING = registry.add_family(activation, "fam", dtypes=("float32",), kernel="fam numpy",
                                  overrides={"relu_grad": {"kernel": "fam numpy (gradient)"}})
    registry.add_implementation("tanh", "mistyped", "fam", f"{activation}:tahn")
    registry.add_implementation("relu_grad", "nokernel", "fam", f"{activation}:relu_grad", priority=10,
                                kernel=Ref(f"{activation}:no_such_kernel"))
