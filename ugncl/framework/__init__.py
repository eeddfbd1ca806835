"""The framework: typed config, builders, the trainer, evaluation, metrics and the comparison.

Nothing here knows a particular backbone or method; both plug in through registries
(:mod:`ugncl.backbones.registry` for backbones, :mod:`ugncl.methods` for methods).
"""
