"""WordNet's noun hierarchy from Debian's wordnet-base files, and the parser on crafted files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from poincare_index.hierarchy import as_relations, noun_closure, noun_edges, subtree_closure
from poincare_index.hierarchy.wordnet import DEFAULT_WORDNET_DIR, mammals

HEADER = "  1 This software and database is being provided ... (licence header)\n"
INDEX = HEADER + (
    "animal n 1 2 @ ~ 1 0 00000100  \n"
    "dog n 2 1 @ 2 0 00000200 00000300  \n"
    "domestic_dog n 1 1 @ 1 0 00000200  \n"
    "frank n 1 1 @i 1 0 00000300  \n"
)
DATA = HEADER + (
    "00000100 05 n 01 animal 0 001 ~ 00000200 n 0000 | a living thing  \n"
    "00000200 05 n 02 dog 0 domestic_dog 0 001 @ 00000100 n 0000 | a canine  \n"
    "00000300 05 n 01 Dog 0 001 @i 00000200 n 0000 | a particular dog  \n"
)


def wordnet_dir():
    root = Path(os.environ.get("WORDNET_DIR", DEFAULT_WORDNET_DIR))
    if not (root / "data.noun").is_file():
        why = f"Debian's wordnet-base is missing ({root}/data.noun; apt-get install wordnet-base)"
        if os.environ.get("CI"):
            pytest.fail(f"WordNet test cannot run in CI: {why}")
        pytest.skip(why)
    return root


def test_the_parser_names_synsets_as_nltk_does(tmp_path):
    (tmp_path / "index.noun").write_text(INDEX)
    (tmp_path / "data.noun").write_text(DATA)
    assert sorted(noun_edges(tmp_path)) == [("dog.n.01", "animal.n.01"), ("dog.n.02", "dog.n.01")]
    assert noun_edges(tmp_path, instances=False) == [("dog.n.01", "animal.n.01")]
    assert sorted(noun_closure(tmp_path)) == [
        ("dog.n.01", "animal.n.01"), ("dog.n.02", "animal.n.01"), ("dog.n.02", "dog.n.01"),
    ]  # fmt: skip


def test_broken_or_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        noun_edges(tmp_path)
    (tmp_path / "index.noun").write_text(INDEX)
    (tmp_path / "data.noun").write_text(DATA + "00000400 05 n zz\n")
    with pytest.raises(ValueError, match=r"data.noun:5 is not a WordNet data line"):
        noun_edges(tmp_path)
    (tmp_path / "data.noun").write_text(DATA + "00000400 05 n 01 cat 0 000 | a cat\n")
    with pytest.raises(ValueError, match="missing from index.noun"):
        noun_edges(tmp_path)


@pytest.mark.slow
def test_the_noun_closure_has_every_noun_synset():
    root = wordnet_dir()
    edges = noun_edges(root)
    rel = as_relations(edges, closure=True)
    assert rel.n_nodes == 82_115  # every noun synset of WordNet 3.0 (the paper's count)
    assert rel.edges.shape[0] == 743_241
    lookup = rel.index_of()
    pairs = set(map(tuple, rel.edges.tolist()))
    assert (lookup["dog.n.01"], lookup["mammal.n.01"]) in pairs
    # the shipped mammal closure is the one these files give
    assert sorted(subtree_closure(edges, "mammal.n.01")) == sorted(mammals())
