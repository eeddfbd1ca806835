"""The run room: a run assembled from the registries. Config loading and validation against
the registered backbones and methods, the builders, one training run from a config, and the
comparison of runs. Sits above the core, the backbones and the methods.
"""
