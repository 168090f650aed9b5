"""Course tooling, out of the student's way: the notebook pipeline (solutions -> labs -> grade), class grading,
releases (assignments, nbgrader), slides, and the ``hybrid-lab`` command. Imports nothing from the teaching layers.

    hybrid-lab execute|build|check|grade|slides|export ...      (or python -m hybrid_lab.course ...)
"""
from hybrid_lab.course.pipeline import repo_root

__all__ = ["repo_root"]
