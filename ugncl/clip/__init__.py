"""The CLIP track: raw-image data (and, at merge, the open_clip backbone)."""
