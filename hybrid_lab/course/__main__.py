"""``python -m hybrid_lab.course``: the ``hybrid-lab`` command (what a venv without its console script can run)."""
import sys

from hybrid_lab.course.cli import main

sys.exit(main())
