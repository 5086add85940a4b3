"""``algoswap new-plugin``: a ready plugin distribution, written from the templates beside this module.

The templates are plain files ending in ``.tmpl`` (``common/`` for every flavour, then ``python/`` or
``cpp/``); ``{{key}}`` in their paths and contents is replaced by the values ``_values`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import AlgoswapError, RegistrationError
from .._records import check_name
from .._version import API_VERSION, __version__

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

SUFFIX = ".tmpl"


class ScaffoldError(AlgoswapError, ValueError):
    """new-plugin cannot write the plugin asked for: a bad or taken name, or an existing folder."""


@dataclass(frozen=True)
class Flavour:
    folders: tuple[str, ...]
    what: str  # what the conv2d algorithm is, for the README
    files: dict[str, str]  # written file -> what it is, for the README's table
    build_note: str
    publish: str


FLAVOURS = {
    "python": Flavour(
        ("common", "python"), "im2col and a matrix product, in NumPy",
        {"pyproject.toml": "the distribution: dependencies, and the entry point algoswap finds the plugin by",
         "{{package}}/__init__.py": "the hooks: the backend and its implementation, registered",
         "{{package}}/conv.py": "the conv2d implementation",
         "tests/test_{{name}}_conformance.py": "runs algoswap's conformance kit on the backend"},
        "", "build the distribution and upload it:\n\n```sh\npip install build twine\npython -m build          # dist/*.whl and dist/*.tar.gz\n"
            "twine upload dist/*\n```\n\nThe wheel is pure Python: one wheel serves every platform.\n"),
    "cpp": Flavour(
        ("common", "cpp"), "a direct convolution in C++, multithreaded with OpenMP",
        {"pyproject.toml": "the distribution: build with scikit-build-core, and the entry point algoswap finds the "
                           "plugin by",
         "CMakeLists.txt": "builds the extension `{{package}}._kernels` (pybind11, OpenMP)",
         "src/module.cpp": "the bindings: arrays of the wrong dtype or memory order are refused, never copied",
         "src/conv.hpp": "the kernel's interface",
         "src/conv.cpp": "the conv2d kernel, and the name `explain` shows for it",
         "{{package}}/__init__.py": "the hooks: the backend, its availability probe and its implementation",
         "{{package}}/conv.py": "the implementation: makes the output, calls the extension; which calls it serves",
         "tests/test_{{name}}_conformance.py": "runs algoswap's conformance kit on the backend"},
        "\n                                  # (needs a C++17 compiler with OpenMP; pip fetches CMake, "
        "pybind11 and scikit-build-core if missing)",
        "build wheels and upload them:\n\n```sh\npip install cibuildwheel twine\n"
        "CIBW_CONFIG_SETTINGS=\"cmake.define.NATIVE=OFF\" cibuildwheel --output-dir dist   # manylinux wheels, in Docker\n"
        "pip install build && python -m build --sdist                                  # and the source\n"
        "twine upload dist/*\n```\n\n`NATIVE=OFF` builds for the baseline instruction set of the platform, so the wheel "
        "runs on every CPU of it; the default (`ON`, `-march=native`) is for builds used on the machine that makes them. "
        "Build a wheel per Python version and platform (cibuildwheel does), or an sdist only, which pip then builds on "
        "the user's machine.\n"),
}


def new_plugin(name: str, *, cpp: bool = False, directory: str | Path = ".") -> Path:
    """Write the distribution ``algoswap-NAME`` (package ``algoswap_NAME``, backend ``name`` with conv2d
    "direct") into ``directory/algoswap-NAME``; return that folder. ScaffoldError if the name is not a
    lower-case identifier, is taken by an installed plugin or backend, or the folder exists."""
    _check_name(name)
    target = Path(directory) / f"algoswap-{name}"
    if target.exists():
        raise ScaffoldError(f"new-plugin: {target} already exists; remove it, or choose another NAME or --dir")
    flavour = FLAVOURS["cpp" if cpp else "python"]
    for relative, text in render(name, flavour).items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return target


def render(name: str, flavour: Flavour) -> dict[str, str]:
    """The files of the plugin: relative path -> contents."""
    values = _values(name, flavour)
    files: dict[str, str] = {}
    for folder in flavour.folders:
        for relative, template in _templates(resources.files(__name__) / folder, ""):
            files[_substitute(relative, values)] = _substitute(template.read_text(encoding="utf-8"), values)
    return dict(sorted(files.items()))


def _templates(folder: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    """(written path, template) of every template under ``folder``; ``gitignore`` is written ``.gitignore``."""
    found = []
    for entry in folder.iterdir():
        if entry.is_dir():
            found += _templates(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(SUFFIX):
            written = entry.name[: -len(SUFFIX)]
            found.append((prefix + ("." + written if written == "gitignore" else written), entry))
    return found


def _values(name: str, flavour: Flavour) -> dict[str, str]:
    major, minor = (int(part) for part in API_VERSION.split(".")[:2])
    core_major, core_minor = (int(part) for part in __version__.split(".")[:2])
    names = {"name": name, "package": f"algoswap_{name}", "distribution": f"algoswap-{name}"}
    files = "\n".join(f"| `{_substitute(path, names)}` | {_substitute(what, names)} |" for path, what in flavour.files.items())
    return {**names, "api_range": f">={major}.{minor},<{major + 1}",
            "core_range": f">={core_major}.{core_minor},<{core_major}.{core_minor + 1}" if core_major == 0
            else f">={core_major}.{core_minor},<{core_major + 1}",
            "what": flavour.what, "files": files, "build_note": flavour.build_note, "publish": flavour.publish}


def _substitute(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def _check_name(name: str) -> None:
    try:
        check_name("backend", name)
    except RegistrationError as exc:
        raise ScaffoldError(f"new-plugin: {exc}; got {name!r}") from None
    taken = _taken(name)
    if taken:
        raise ScaffoldError(f"new-plugin: the name {name!r} is taken: {taken}; choose another NAME")


def _taken(name: str) -> str | None:
    """Why an installed plugin, backend, distribution or module already has ``name``, or None."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, distribution

    from .._global import get_registry

    registry = get_registry()
    for plugin in registry.plugins:
        if plugin.name == name:
            return f"it is the entry point of the installed plugin {plugin.owner}"
    if name in registry.backends:
        return f"it is a backend of the installed plugin {registry.backends[name].owner}"
    try:
        found = distribution(f"algoswap-{name}")
        return f"the distribution algoswap-{name} {found.version} is installed"
    except PackageNotFoundError:
        pass
    if importlib.util.find_spec(f"algoswap_{name}") is not None:
        return f"a module algoswap_{name} is importable"
    return None
