"""The SGRAF track: precomputed region features, the SGR/SAF heads of :mod:`sgraf`, and their data.

Modules: :mod:`.backbone` (config section and builders), :mod:`.experiment` (vocabulary, noisy
training split, dev and test), :mod:`.data` (the training data the trainer iterates).
"""
