"""The model: custom-gradient ops (the neuron), the SGH model, encoding, and SavedModel export."""
