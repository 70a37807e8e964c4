"""Timestamped text for the memory benchmarks.

* ``debian_changelog_items``: the change items ("* ...") of every ``changelog.Debian.gz`` under
  /usr/share/doc, each with its entry's date and source package: real, dated, labelled text
  (~90,000 items on a Debian machine with a few hundred packages).
* ``generated_items``: seeded synthetic notes (a topic, an entity, a verb phrase) spread over a
  year, labelled by topic; used to top up to the requested size or when no changelogs exist.
"""

from __future__ import annotations

import glob
import gzip
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

import numpy as np
from numpy.typing import NDArray

_HEADER = re.compile(r"^(\S+) \(([^)]*)\)")
_TRAILER = re.compile(r"^ -- .*?>  (.+)$")
_ITEM = re.compile(r"^  [*+-] (.*)$")
_CONT = re.compile(r"^    +(\S.*)$")


@dataclass
class Items:
    texts: list[str]
    t: list[datetime]
    labels: list[str]


def debian_changelog_items(min_words: int = 4, root: str = "/usr/share/doc") -> Items:
    texts: list[str] = []
    times: list[datetime] = []
    labels: list[str] = []
    for path in sorted(glob.glob(f"{root}/*/changelog.Debian.gz")):
        try:
            lines = gzip.open(path, "rt", errors="replace").read().splitlines()
        except OSError:
            continue
        package, pending, current = None, [], None
        for line in lines:
            m = _HEADER.match(line)
            if m:
                package, pending, current = m.group(1), [], None
                continue
            m = _ITEM.match(line)
            if m:
                current = [m.group(1).strip()]
                pending.append(current)
                continue
            m = _CONT.match(line)
            if m and current is not None and not line.lstrip().startswith(("*", "-", "+")):
                current.append(m.group(1).strip())
                continue
            m = _TRAILER.match(line)
            if m and package is not None:
                try:
                    when = parsedate_to_datetime(m.group(1).strip()).astimezone(timezone.utc)
                except (TypeError, ValueError):
                    pending, current = [], None
                    continue
                for item in pending:
                    text = " ".join(item)
                    if len(text.split()) >= min_words:
                        texts.append(text)
                        times.append(when)
                        labels.append(package)
                pending, current = [], None
    return Items(texts, times, labels)


_TOPICS = {
    "billing": ["invoice", "refund", "charge", "payment", "subscription", "receipt"],
    "delivery": ["parcel", "courier", "shipment", "tracking", "warehouse", "address"],
    "account": ["password", "login", "email", "profile", "two-factor", "username"],
    "product": ["battery", "screen", "charger", "firmware", "warranty", "speaker"],
    "training": ["sprints", "tempo run", "long run", "intervals", "recovery", "hill repeats"],
    "deploy": ["rollout", "canary", "rollback", "latency", "rate limit", "release"],
}
_VERBS = [
    "reported a problem with",
    "asked about",
    "confirmed",
    "complained about",
    "praised",
    "updated",
    "escalated",
]
_QUAL = [
    "again",
    "this morning",
    "after the update",
    "twice",
    "for the third time",
    "without details",
    "urgently",
]
_NAMES = ["Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Goran", "Hana", "Ivo", "Jun"]


def generated_items(n: int, seed: int = 0, end: datetime | None = None, days: float = 365.0) -> Items:
    rng = np.random.default_rng(seed)
    end = end or datetime(2026, 6, 1, tzinfo=timezone.utc)
    topics = list(_TOPICS)
    texts, times, labels = [], [], []
    for _ in range(n):
        topic = topics[rng.integers(len(topics))]
        words = _TOPICS[topic]
        a, b = rng.choice(len(words), 2, replace=False)
        text = (
            f"{_NAMES[rng.integers(len(_NAMES))]} {_VERBS[rng.integers(len(_VERBS))]} the {words[a]} "
            f"and the {words[b]} {_QUAL[rng.integers(len(_QUAL))]} (case {rng.integers(100_000)})"
        )
        texts.append(text)
        times.append(end - timedelta(hours=float(rng.uniform(0, days * 24))))
        labels.append(topic)
    return Items(texts, times, labels)


def memory_items(n: int, seed: int = 0) -> tuple[Items, str]:
    """n items: Debian changelog items (a seeded sample when there are more), topped up with
    generated ones; and a description of the mix."""
    real = debian_changelog_items()
    rng = np.random.default_rng(seed)
    if len(real.texts) > n:
        keep = np.sort(rng.choice(len(real.texts), n, replace=False))
        real = Items([real.texts[i] for i in keep], [real.t[i] for i in keep], [real.labels[i] for i in keep])
    extra = n - len(real.texts)
    if extra > 0:
        end = max(real.t) if real.t else None
        gen = generated_items(extra, seed, end)
        real = Items(real.texts + gen.texts, real.t + gen.t, real.labels + gen.labels)
    return real, f"{n - max(extra, 0):,} Debian changelog items + {max(extra, 0):,} generated notes"


def labelled_changelog_split(
    n: int, n_queries: int, seed: int
) -> tuple[Items, NDArray[np.int64], NDArray[np.int64]]:
    """(all changelog items, corpus indices, held-out query indices): a seeded sample of ``n``
    items of the packages with >= 20 items, and queries from the rest whose package has >= 10
    items in the corpus (the label is the package). Empty when the machine has no changelogs."""
    items = debian_changelog_items()
    counts = Counter(items.labels)
    rng = np.random.default_rng(seed)
    eligible = [i for i, lab in enumerate(items.labels) if counts[lab] >= 20]
    corpus_idx = (
        rng.choice(eligible, min(n, len(eligible)), replace=False) if eligible else np.zeros(0, np.int64)
    )
    in_corpus = Counter(items.labels[i] for i in corpus_idx)
    chosen = set(corpus_idx.tolist())
    pool = [i for i in eligible if i not in chosen and in_corpus[items.labels[i]] >= 10]
    q_idx = rng.choice(pool, min(n_queries, len(pool)), replace=False) if pool else np.zeros(0, np.int64)
    return items, corpus_idx, q_idx
