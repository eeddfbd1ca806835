"""The CLIP track: per-sample contrastive losses (the open_clip adapter lands beside them)."""
