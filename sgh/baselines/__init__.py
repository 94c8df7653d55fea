"""Classic learning-to-hash baselines as scikit-learn transformers.

Each maps ``(n, d)`` float features to ``(n, n_bits)`` bool codes (column j = code bit j; pack
with :func:`sgh.codes.pack_bits`); `sgh.methods.METHODS` names them for `sgh-train`:

=========  ==========================================================  =======================
name       method                                                      n_bits > n_features
=========  ==========================================================  =======================
``lsh``    :class:`LSH`: sign of random Gaussian projections, centred  allowed
``pcah``   :class:`PCAH`: sign of the top principal components         ValueError
``itq``    :class:`ITQ`: PCA + iterative quantization (Gong 2011)      ValueError
``sh``     :class:`SH`: Spectral Hashing (Weiss 2008)                  allowed
``sph``    :class:`SpH`: Spherical Hashing (Heo 2012), Hamming-ranked  allowed
=========  ==========================================================  =======================

Usage::

    hasher = ITQ(n_bits=32, random_state=0).fit(split.train)
    database_codes = pack_bits(hasher.transform(split.database))
"""

from sgh.baselines.itq import ITQ
from sgh.baselines.lsh import LSH
from sgh.baselines.pcah import PCAH
from sgh.baselines.sh import SH
from sgh.baselines.sph import SpH

__all__ = ["ITQ", "LSH", "PCAH", "SH", "SpH"]
