"""The model: custom-gradient ops (the neuron), the SGH model, encoding, and SavedModel export.

    ops.py          doubly_sn (the doubly stochastic neuron), ste_sign, gradient_reversal
    sgh_model.py    linear SGH: normaliser, encoder, decoder, the paper's and the released objective
    encoding.py     deterministic codes of features in memory or streamed, in chunks
    export.py       the encoder as a SavedModel (float features in, packed codes out); loading it
"""
