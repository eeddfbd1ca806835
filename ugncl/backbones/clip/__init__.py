"""The CLIP track: an open_clip backbone behind the similarity-model interface, on raw images.

Modules: :mod:`.data` (raw-image datasets on the shared split definition), :mod:`.pixels` (the
memory-mapped uint8 pixel cache, normalisation on the device), :mod:`.models`
(the package's own open_clip model configs, registered offline), :mod:`.loading` (local weight
files only; OpenAI/QuickGELU detection), :mod:`.adapter` (``CLIPSimilarity`` and
``build_clip``), :mod:`.backbone` (the registry's config section and builders), :mod:`.losses`
(per-sample InfoNCE), :mod:`.pretrain` (the tiny model's stand-in for web pretraining on a
clean pool of synthetic scenes).
"""
