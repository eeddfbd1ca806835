"""Which renderer draws a generated world's scene records (``world.json``'s ``generator``).

The default world (no ``generator`` key, or ``default``) is drawn by
:func:`precomputed.synthetic.render.render_scene`, the counting world by
:func:`precomputed.synthetic.render_counting.render_counting_scene`; the activity world has
no renderer (its worlds have region features only).
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image

from .render import render_scene
from .render_counting import render_counting_scene

__all__ = ["RENDERERS", "renderer_for"]

#: ``render(scene_record, size) -> PIL.Image`` per generator name.
RENDERERS: dict[str, Callable[[dict, int], Image.Image]] = {
    "default": render_scene,
    "counting": render_counting_scene,
}


def renderer_for(generator: str | None) -> Callable[[dict, int], Image.Image]:
    """The renderer of a world made by ``generator`` (None: the default world).

    Raises:
        ValueError: the generator's worlds have no image renderer (named, with the ones that do).
    """
    name = generator or "default"
    if name not in RENDERERS:
        raise ValueError(
            f"the {name} generator has no image renderer; CLIP worlds exist for "
            f"{', '.join(sorted(RENDERERS))} (make the world with --generator counting, or "
            "without --generator)"
        )
    return RENDERERS[name]
