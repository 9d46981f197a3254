# pytester's in-process runs drop modules first imported inside them, and numpy's C core cannot be loaded
# twice in one process: import the heavy libraries the plugin uses once, up front.
import numpy  # noqa: F401
import scipy.stats  # noqa: F401
import torch  # noqa: F401
