"""Course tooling, out of the student's way: the notebook pipeline (solutions -> labs -> grade) and the
``hybrid-lab`` command. Imports nothing from the teaching layers.

    python -m hybrid_lab.course execute|build|check|grade ...
"""
from hybrid_lab.course.pipeline import repo_root

__all__ = ["repo_root"]
