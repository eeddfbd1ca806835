"""The core every plug-in stands on: typed config sections, the similarity and method
interfaces, the engine (trainer, checkpoints, devices, distributed helpers), metrics, optimisers
and the generic scoring of a split.

Nothing here names a backbone or a method, and nothing here imports the registries; the run
room (:mod:`ugncl.run`) assembles a run from them.
"""
