"""Adapters for the frameworks users build on, each behind its extra and imported lazily:

- :mod:`poincare_index.integrations.langchain` (``pip install ".[langchain]"`` from a checkout
  of poincare_index): ``PoincareVectorStore``, ``MemoryRetriever``, ``PoincareEmbeddings``.
- :mod:`poincare_index.integrations.llama_index` (``pip install ".[llama-index]"`` from a
  checkout of poincare_index): ``PoincareVectorStore``.

The shared pieces (metadata kept as JSON with filterable scalar columns, MMR by Poincaré
distance) live in :mod:`poincare_index.integrations._documents`.
"""
