"""Package discovery that pyproject.toml alone cannot express: every subpackage is found
automatically, and the top-level data/ folder is installed as the package data placement.data so
that `solve` with no arguments finds the default example after a plain `pip install .`."""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["placement*", "heuristics*", "formulations*", "solvers*"]) + ["placement.data"],
    package_dir={"placement.data": "data"},
)
