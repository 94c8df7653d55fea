"""The public Keras layers of `sgh.model.layers`; importing this module imports TensorFlow."""

from sgh.model.quiet_tensorflow import import_tensorflow

import_tensorflow()

from sgh.model.layers import DoublySN, GradientReversal, StraightThroughSign  # noqa: E402

__all__ = ["DoublySN", "GradientReversal", "StraightThroughSign"]
