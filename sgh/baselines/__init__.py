"""Classic learning-to-hash baselines as scikit-learn transformers.

Each maps ``(n, d)`` float features to ``(n, n_bits)`` bool codes (column j = code bit j), which
``encode`` packs: ``ITQ(n_bits=32).fit(train).encode(database)``. `sgh.methods.METHODS` names them
for `sgh-train`: ``lsh`` (:class:`LSH`), ``pcah`` (:class:`PCAH`), ``itq`` (:class:`ITQ`), ``sh``
(:class:`SH`) and ``sph`` (:class:`SpH`).
"""

from sgh.baselines.itq import ITQ
from sgh.baselines.lsh import LSH
from sgh.baselines.pcah import PCAH
from sgh.baselines.sh import SH
from sgh.baselines.sph import SpH

__all__ = ["ITQ", "LSH", "PCAH", "SH", "SpH"]
