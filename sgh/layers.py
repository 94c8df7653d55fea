"""The public Keras layers: `from sgh.layers import DoublySN` (and its two siblings).

They live in `sgh.model.layers` (see there); importing this module imports TensorFlow, quietly.
"""

from sgh.model.quiet_tensorflow import import_tensorflow

import_tensorflow()

from sgh.model.layers import DoublySN, GradientReversal, StraightThroughSign  # noqa: E402

__all__ = ["DoublySN", "GradientReversal", "StraightThroughSign"]
