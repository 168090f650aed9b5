"""``python -m hybrid_lab.course``: the pipeline's command line."""
import sys

from hybrid_lab.course.pipeline import main

sys.exit(main())
