"""Builds algoswap_dnnl._dnnl against the oneDNN of the onednn-cpu-gomp wheels (found through their
installed file lists, which also works inside pip's isolated build environment)."""

from importlib import metadata
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup


def _installed(distribution: str, suffix: str) -> Path:
    dist = metadata.distribution(distribution)
    for file in dist.files or ():
        if ("/" + str(file).replace("\\", "/")).endswith("/" + suffix):
            return Path(str(dist.locate_file(file))).resolve()
    raise RuntimeError(f"{distribution} is installed without {suffix}")


class BuildWithOneDNN(build_ext):
    def build_extensions(self) -> None:
        include = _installed("onednn-devel-cpu-gomp", "include/oneapi/dnnl/dnnl.hpp").parents[2]
        library = _installed("onednn-cpu-gomp", "libdnnl.so.3").parent
        for ext in self.extensions:
            ext.include_dirs.append(str(include))
            ext.library_dirs.append(str(library))
        super().build_extensions()


ParallelCompile("NPY_NUM_BUILD_JOBS").install()
setup(
    ext_modules=[
        Pybind11Extension(
            "algoswap_dnnl._dnnl",
            sorted(str(p) for p in Path("src").glob("*.cpp")),
            cxx_std=17,
            libraries=["dnnl"],
            extra_compile_args=["-O3", "-fopenmp"],  # OpenMP: the NaN scans (src/finite.cpp); libdnnl uses libgomp too
            # site-packages/algoswap_dnnl/ -> <prefix>/lib, where onednn-cpu-gomp puts libdnnl.so.3;
            # an RPATH (not RUNPATH) also serves libdnnl's own dependencies.
            extra_link_args=["-fopenmp", "-Wl,-rpath,$ORIGIN/../../..", "-Wl,--disable-new-dtags"],
        )
    ],
    cmdclass={"build_ext": BuildWithOneDNN},
)
