// The graph's repair as one unit: what runs after an add and after removals (hnsw.h), each step
// behind a GraphSwitches switch; the steps themselves are in hnsw_connectivity.cpp.
#include <vector>

#include "hnsw.h"

namespace poincare {

std::size_t HnswGraph::repair_after_add(const VectorStorage& storage,
                                        const std::vector<std::uint32_t>& slots,
                                        ScratchPool& scratch, ThreadPool& pool) {
  rows_since_repair_ += slots.size();
  std::size_t added = 0;
  // A chat loop adds one row at a time: a full walk per add made each add O(n). A small batch
  // links its own orphans (a new node no neighbour kept a back-link to) and leaves the nodes
  // its pruning may have orphaned to the next full repair, at most n/64 rows later.
  const bool due = rows_since_repair_ * kRepairEvery >= nodes();
  if (due || (switches_.reachability && !link_new_nodes(storage, slots))) {
    added += repair_connectivity(storage, scratch, pool);
    rows_since_repair_ = 0;
  }
  // Reachable now; findable too: one search per new row (a small part of its insertion).
  if (switches_.ways_in) added += link_unfound(storage, slots, scratch, pool);
  return added;
}

std::size_t HnswGraph::repair_after_removal(const VectorStorage& storage, ScratchPool& scratch,
                                            ThreadPool& pool) {
  // Re-selected lists can leave a node without an in-link a walk from the entry reaches ...
  std::size_t added = repair_connectivity(storage, scratch, pool);
  if (!switches_.ways_in) return added;
  // ... or without the link a beam came in by: most nodes lost an in-link (5 % of the nodes
  // leaving, each with 2M out-links), so every remaining one is probed.
  std::vector<std::uint32_t> remaining;
  remaining.reserve(storage.live());
  for (std::uint32_t s = 0; s < storage.slots(); ++s)
    if (!storage.is_deleted(s)) remaining.push_back(s);
  return added + link_unfound(storage, remaining, scratch, pool);
}

}  // namespace poincare
