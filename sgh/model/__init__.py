"""The model: custom-gradient ops (the neuron), the SGH model, encoding, and SavedModel export
(one line per module: docs/development.md)."""
