"""The synthetic world: scenes -> (region features, captions) in the SCAN/NCR layout."""

from .captions import caption_scene
from .features import DirectionBank, plan_regions, render_features
from .world import Relation, Scene, SceneObject, sample_scenes
from .writer import CAPTIONS_PER_IMAGE, DATASET_NAME, make_synthetic, noise_file_name

__all__ = [
    "CAPTIONS_PER_IMAGE",
    "DATASET_NAME",
    "DirectionBank",
    "Relation",
    "Scene",
    "SceneObject",
    "caption_scene",
    "make_synthetic",
    "noise_file_name",
    "plan_regions",
    "render_features",
    "sample_scenes",
]
