"""Ships the repository's bundled example as package data of hami-core.

All metadata lives in pyproject.toml; this file only adds one build step: the files of
``examples/`` that ``hami simulate`` runs without arguments (``cluster.yaml``,
``workloads/``, and the other example clusters and workloads) are copied into the
built package as ``hami_core/examples/``. ``examples/`` stays the one copy in the
repository; an editable install reads it in place (``hami_core.simulate.runner``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "examples"
#: What the package carries: YAML clusters and workload folders (not backend-example/,
#: a Python project of its own).
PATTERNS = ("*.yaml", "README.md", "workloads*/*.yaml")


class BuildPyWithExamples(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the source tree's examples/ is read in place
        if not (EXAMPLES / "cluster.yaml").is_file():
            raise SystemExit(f"hami-core: the bundled example is missing ({EXAMPLES})")
        target = Path(self.build_lib) / "hami_core" / "examples"
        shutil.rmtree(target, ignore_errors=True)
        for pattern in PATTERNS:
            for src in sorted(EXAMPLES.glob(pattern)):
                dst = target / src.relative_to(EXAMPLES)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildPyWithExamples})
