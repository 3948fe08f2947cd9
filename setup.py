"""Builds the _hodu extension with hodu's own CMake build (pyproject.toml has
the metadata). `pip install .` runs this: it configures CMake in build-pip/
(with the Python pip runs), builds the `_hodu` target (and `hodu_torch_ops`, torch.ops.hodu's
C++ extension, when CMake found libtorch) and puts the modules into the package. HODU_CMAKE_BUILD_DIR=<build> reuses an existing build folder instead."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # HODU_CMAKE_BUILD_DIR: reuse a configured hodu build folder (only _hodu is built there).
        build_dir = os.environ.get("HODU_CMAKE_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                raise RuntimeError(f"HODU_CMAKE_BUILD_DIR={build_dir} is not a configured CMake build folder")
        else:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            os.makedirs(build_dir, exist_ok=True)
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DHODU_BUILD_PYTHON=ON", "-DHODU_BUILD_TESTS=OFF",
                                   f"-DPython_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(min(os.cpu_count() or 1, 4)))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_hodu", "--parallel", jobs])
        built_dir = os.path.join(build_dir, "python", "hodu")
        module = [f for f in os.listdir(built_dir) if f.startswith("_hodu") and f.endswith((".so", ".pyd"))]
        if not module:
            raise RuntimeError(f"the CMake build made no _hodu module in {built_dir}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built_dir, module[0]), target)
        # torch.ops.hodu's C++ extension, when CMake found libtorch (hodu.torch registers the ops
        # from Python otherwise).
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            has_torch_ops = "HODU_TORCH_OPS_TARGET:INTERNAL=ON" in f.read()
        if has_torch_ops:
            subprocess.check_call(["cmake", "--build", build_dir, "--target", "hodu_torch_ops", "--parallel", jobs])
            torch_dir = os.path.join(os.path.dirname(target), "torch")
            os.makedirs(torch_dir, exist_ok=True)
            for name in ("_hodu_torch_ops.so", "_hodu_torch_ops.torch_version"):
                shutil.copyfile(os.path.join(built_dir, "torch", name), os.path.join(torch_dir, name))


# Build products go to build-pip/ (setuptools' default, build/, is the project's CMake build folder).
os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)
setup(ext_modules=[CMakeExtension("hodu._hodu")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}})
