"""Poincaré embeddings of your own hierarchy (Nickel & Kiela, 2017): a numba trainer, the
paper's reconstruction metrics computed with the exact index, and WordNet's noun hierarchy.

``train`` needs the ``[numba]`` extra; the rest needs only the base package.
"""

from .embedding import Embedding
from .evaluate import Reconstruction, reconstruction
from .graph import Relations, as_relations
from .train import TrainConfig, train
from .wordnet import mammals, noun_closure, noun_edges, subtree_closure

__all__ = [
    "Embedding", "Reconstruction", "Relations", "TrainConfig", "as_relations", "mammals",
    "noun_closure", "noun_edges", "reconstruction", "subtree_closure", "train",
]  # fmt: skip
