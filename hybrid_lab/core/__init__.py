"""Bottom layer: the building blocks every model shares (``blocks``), argument checks (``checks``), the numpy
Adam optimiser (``optim``) and the progress bar (``progress``). Imports nothing else from ``hybrid_lab``."""
