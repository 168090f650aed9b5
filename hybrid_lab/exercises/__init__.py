"""Layer 7 (top): the graded exercises. ``labNN.py`` registers one :class:`Exercise` per exercise of notebook NN
(the reference, the cases, the library functions switched off while the student's code runs); ``framework.check``
runs them. May import every layer below; nothing imports it but the notebooks (and the grader reads only the log
it writes, through ``hybrid_lab.core.grading``)."""
from hybrid_lab.exercises.framework import Case, Exercise, check, evaluate, get, register

__all__ = ["check", "evaluate", "get", "register", "Case", "Exercise"]
