"""The backbones behind the one similarity interface: SGRAF on precomputed region features
(:mod:`.sgraf`) and open_clip on raw images (:mod:`.clip`), each with its data and its config
section.
"""
