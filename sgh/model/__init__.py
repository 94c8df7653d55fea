"""The model: custom-gradient ops (the neuron), the SGH model, encoding, and SavedModel export.

    ops.py          doubly_sn (the doubly stochastic neuron), ste_sign, gradient_reversal
    sgh_model.py    SGH: normaliser, linear or mlp encoder and decoder, the paper's and the
                    released objective
    encoding.py     deterministic codes of features in memory or streamed, in chunks
    export.py       the encoder as a SavedModel (float features in, packed codes out); loading it
    quiet_tensorflow.py
                    TensorFlow imported without its start-up chatter, after pointing XLA at the
                    compiled-step cache; what C++ code writes to the terminal held back
"""
