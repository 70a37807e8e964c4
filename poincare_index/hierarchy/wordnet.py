"""WordNet's noun hierarchy, read from WordNet 3.0's own data files (Debian's ``wordnet-base``
puts them in /usr/share/wordnet) without nltk or a download; and the mammal subtree's closure,
shipped with the package.

Synsets are named as nltk names them (``dog.n.01``: the first lemma, lower-cased, and its sense
number in ``index.noun``). A noun's parents are its hypernyms (``@``) and instance hypernyms
(``@i``), so the closure covers all 82,115 noun synsets, as in Nickel & Kiela (2017).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from .graph import as_relations

__all__ = ["DEFAULT_WORDNET_DIR", "mammals", "noun_edges", "noun_closure", "subtree_closure"]

DEFAULT_WORDNET_DIR = "/usr/share/wordnet"


def _wordnet_dir(path: str | os.PathLike[str] | None) -> Path:
    root = Path(os.environ.get("WORDNET_DIR", DEFAULT_WORDNET_DIR) if path is None else path)
    for name in ("data.noun", "index.noun"):
        if not (root / name).is_file():
            raise FileNotFoundError(
                f"no WordNet {name} in {root}: install Debian's wordnet-base "
                "(apt-get install wordnet-base) or pass the directory of WordNet 3.0's dict files"
            )
    return root


def _sense_numbers(root: Path) -> dict[tuple[str, int], int]:
    """(lemma, synset offset) -> sense number, from index.noun (offsets in sense order)."""
    senses: dict[tuple[str, int], int] = {}
    with open(root / "index.noun", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.startswith(" "):
                continue  # the licence header
            fields = line.split()
            try:
                lemma, n_synsets, n_pointers = fields[0], int(fields[2]), int(fields[3])
                offsets = fields[4 + n_pointers + 2 : 4 + n_pointers + 2 + n_synsets]
                for sense, offset in enumerate(offsets, 1):
                    senses[(lemma, int(offset))] = sense
            except (IndexError, ValueError):
                raise ValueError(f"{root / 'index.noun'}:{line_no} is not a WordNet index line") from None
    return senses


def noun_edges(
    path: str | os.PathLike[str] | None = None, *, instances: bool = True
) -> list[tuple[str, str]]:
    """Every (noun synset, hypernym) pair of WordNet's data.noun in ``path`` (default:
    $WORDNET_DIR or /usr/share/wordnet); ``instances=True`` adds the instance hypernyms (a
    named city to "city"), without which 7,700 instance synsets have no parent."""
    root = _wordnet_dir(path)
    senses = _sense_numbers(root)
    first_lemma: dict[int, str] = {}
    parents: dict[int, list[int]] = {}
    with open(root / "data.noun", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.startswith(" "):
                continue
            fields = line.split(" | ", 1)[0].split()
            try:
                offset, n_words = int(fields[0]), int(fields[3], 16)
                first_lemma[offset] = fields[4].lower()
                at = 4 + 2 * n_words
                n_pointers = int(fields[at])
                ups = []
                for p in range(n_pointers):
                    symbol, target, pos = fields[at + 1 + 4 * p : at + 4 + 4 * p]
                    if (symbol == "@" or (instances and symbol == "@i")) and pos == "n":
                        ups.append(int(target))
                parents[offset] = ups
            except (IndexError, ValueError):
                raise ValueError(f"{root / 'data.noun'}:{line_no} is not a WordNet data line") from None

    def name(offset: int) -> str:
        lemma = first_lemma[offset]
        sense = senses.get((lemma, offset))
        if sense is None:
            raise ValueError(f"{root}: synset {offset:08d} ({lemma}) is missing from index.noun")
        return f"{lemma}.n.{sense:02d}"

    names = {offset: name(offset) for offset in first_lemma}
    return [(names[c], names[p]) for c, ups in parents.items() for p in ups]


def noun_closure(path: str | os.PathLike[str] | None = None) -> list[tuple[str, str]]:
    """The transitive closure of :func:`noun_edges`: (noun, every ancestor) pairs."""
    rel = as_relations(noun_edges(path), closure=True)
    return [(rel.names[c], rel.names[p]) for c, p in rel.edges.tolist()]


def subtree_closure(edges: list[tuple[str, str]], root: str) -> list[tuple[str, str]]:
    """The closure pairs among ``root`` and its descendants: (node, ancestor) with both in the
    subtree, as the mammal set of the paper is built."""
    rel = as_relations(edges, closure=True)
    lookup = rel.index_of()
    if root not in lookup:
        raise ValueError(f"{root!r} is not a node of the edges")
    r = lookup[root]
    inside = {c for c, p in rel.edges.tolist() if p == r} | {r}
    return [(rel.names[c], rel.names[p]) for c, p in rel.edges.tolist() if c in inside and p in inside]


def mammals() -> list[tuple[str, str]]:
    """The closure of WordNet 3.0's mammal subtree (1,181 synsets), shipped with the package
    (``data/mammal_closure.tsv``, made by ``subtree_closure(noun_edges(), "mammal.n.01")``)."""
    text = resources.files(__package__).joinpath("data", "mammal_closure.tsv").read_text("utf-8")
    out = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"mammal_closure.tsv:{line_no} is not a child<TAB>parent line")
        out.append((fields[0], fields[1]))
    return out
