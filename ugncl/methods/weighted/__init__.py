"""The weight-based methods: NPC, SDD and OSA, the siamese one-step copy and memory bank they
share, and their per-sample weights.
"""
