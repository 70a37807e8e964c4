// Neighbour selection (hnsw_selection.cpp). select_neighbors is private to HnswGraph; a public
// path reaches it with a known candidate set: a graph restored from hand-built level-0 lists in
// which every node links to one hub, then remove_nodes() taking the hub out. Each node then
// re-selects its list among its other links and the hub's (max 2M), which is exactly
// select_neighbors over a candidate set the test knows. The result is compared with a serial
// float64 rendering of the heuristic the header documents.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "hnsw.h"
#include "support.h"
#include "thread_pool.h"

namespace poincare::test {
namespace {

struct Ref {
  std::vector<std::uint32_t> kept;  // the heuristic's choices, then the refill, each in delta order
  std::size_t chosen = 0;           // where the refill begins
  bool ambiguous = false;           // some decision was a near tie in float32
};

bool near_tie(double a, double b) { return std::fabs(a - b) <= 1e-4 * std::max(a, b); }

// The heuristic in float64: up to max_count - n2 candidates by delta to `base` unless a kept node
// covers them (delta(r, e) < delta(base, e), and with the cover rule a(r), a(e) within a factor
// kCoverRatio), refilled with the nearest passed over; then n2 = max_count / 2 (second order) of
// the rest by |base - e|^2 the same way (covered: |r - e|^2 < |base - e|^2), refilled likewise;
// laid out as the list holds them: the choices, then the refill, each in delta order.
Ref select_ref(const VectorStorage& st, std::uint32_t base, std::vector<std::uint32_t> cands,
               std::size_t max_count, bool second_order, bool cover_rule) {
  const std::size_t dim = st.dim();
  const double c = st.curvature();
  auto a = [&](std::uint32_t s) { return factor_ref(sq_norm_ref(st.vector(s), dim), c); };
  auto l2 = [&](std::uint32_t u, std::uint32_t v) {
    return l2_ref(st.vector(u), st.vector(v), dim);
  };
  auto delta = [&](std::uint32_t u, std::uint32_t v) { return l2(u, v) * a(u) * a(v); };
  Ref out;
  auto by = [&](auto key) {
    std::sort(cands.begin(), cands.end(),
              [&](std::uint32_t x, std::uint32_t y) { return key(x) < key(y); });
    for (std::size_t i = 1; i < cands.size(); ++i)
      out.ambiguous |= near_tie(key(cands[i - 1]), key(cands[i]));
  };
  auto delta_order = [&](std::uint32_t e) { return delta(base, e); };
  by(delta_order);
  if (cands.size() <= max_count) {
    out.kept = cands;
    out.chosen = cands.size();
    return out;
  }
  const std::size_t n2 = second_order ? max_count / 2 : 0;
  std::vector<std::uint32_t> kept, refill;
  auto part = [&](const std::vector<std::uint32_t>& order, std::size_t limit, bool first) {
    std::vector<std::uint32_t> pruned;
    for (const std::uint32_t e : order) {
      if (kept.size() + refill.size() >= limit) break;
      bool covered = false;
      // Every node already in the list may cover e (the first part's refill, in the second).
      std::vector<std::uint32_t> in_list = kept;
      in_list.insert(in_list.end(), refill.begin(), refill.end());
      for (const std::uint32_t r : in_list) {
        const double re = first ? delta(r, e) : l2(r, e), be = first ? delta(base, e) : l2(base, e);
        out.ambiguous |= near_tie(re, be);
        bool cov = re < be;
        if (cov && first && cover_rule) {
          const double ar = a(r), ae = a(e), k = HnswGraph::kCoverRatio;
          out.ambiguous |= near_tie(ar * k, ae) || near_tie(ae * k, ar);
          cov = ar * k >= ae && ae * k >= ar;
        }
        covered = covered || cov;
      }
      (covered ? pruned : kept).push_back(e);
    }
    for (std::size_t j = 0; j < pruned.size() && kept.size() + refill.size() < limit; ++j)
      refill.push_back(pruned[j]);
  };
  part(cands, max_count - n2, true);
  if (n2 > 0) {
    std::vector<std::uint32_t> rest;
    for (const std::uint32_t e : cands)
      if (std::find(kept.begin(), kept.end(), e) == kept.end() &&
          std::find(refill.begin(), refill.end(), e) == refill.end())
        rest.push_back(e);
    std::sort(rest.begin(), rest.end(),
              [&](std::uint32_t x, std::uint32_t y) { return l2(base, x) < l2(base, y); });
    for (std::size_t i = 1; i < rest.size(); ++i)
      out.ambiguous |= near_tie(l2(base, rest[i - 1]), l2(base, rest[i]));
    part(rest, max_count, false);
  }
  auto nearest_first = [&](std::uint32_t x, std::uint32_t y) {
    return delta(base, x) < delta(base, y);
  };
  std::sort(kept.begin(), kept.end(), nearest_first);
  std::sort(refill.begin(), refill.end(), nearest_first);
  out.chosen = kept.size();
  out.kept = kept;
  out.kept.insert(out.kept.end(), refill.begin(), refill.end());
  return out;
}

}  // namespace

TEST_CASE("select_neighbors (via remove_nodes): invariants and the float64 heuristic") {
  const int M = 8;
  const std::size_t cap = 2 * M, n = 60, dim = 6;
  const double c = 1.0;
  const std::uint32_t hub = 0;
  struct Mode {
    bool second_order, cover_rule;
  };
  for (const Mode mode : {Mode{false, false}, Mode{false, true}, Mode{true, true}}) {
    CAPTURE(mode.second_order);
    CAPTURE(mode.cover_rule);
    Rng rng(mode.second_order * 2 + mode.cover_rule + 100);
    VectorStorage storage =
        storage_of(points(rng, n, dim, {0.2, 0.6, 0.85, 0.95, 0.99, 0.999}, c), dim, c);
    // Level-0 lists: the hub links to `cap` nodes; every other node links to the hub and to
    // cap - 1 others (so every node is in some list and nobody links to itself).
    const std::size_t stride = HnswGraph::level0_stride_for(M);
    std::vector<std::vector<std::uint32_t>> lists(n);
    for (std::uint32_t s = 0; s < n; ++s) {
      auto& l = lists[s];
      if (s != hub) l.push_back(hub);
      while (l.size() < cap) {
        const auto t = static_cast<std::uint32_t>(rng.below(n));
        if (t != s && std::find(l.begin(), l.end(), t) == l.end()) l.push_back(t);
      }
    }
    MappableArray<std::uint32_t> level0;
    level0.resize(n * stride, 0);
    for (std::size_t s = 0; s < n; ++s) {
      level0[s * stride] = static_cast<std::uint32_t>(lists[s].size());
      std::copy(lists[s].begin(), lists[s].end(), level0.data() + s * stride + 1);
    }
    HnswParams params;
    params.M = M;
    auto graph = HnswGraph::restore(params, std::vector<std::int8_t>(n, 0), std::move(level0), {},
                                    {}, 1, 0, true);
    GraphSwitches sw;
    sw.second_order = mode.second_order;
    sw.cover_rule = mode.cover_rule;
    graph->set_switches(sw);
    REQUIRE(storage.remove(hub));
    ThreadPool pool(1);
    CHECK(graph->remove_nodes(storage, {hub}, pool) == n - 1);
    CHECK(graph->level0_list(hub)[0] == 0);
    const GraphStats stats = graph->check_integrity(storage.deleted_flags());
    CHECK(stats.links <= (n - 1) * cap);

    std::size_t compared = 0;
    for (std::uint32_t s = 1; s < n; ++s) {
      CAPTURE(s);
      // The candidates: s's other links and the hub's, s itself excluded.
      std::set<std::uint32_t> cand(lists[s].begin() + 1, lists[s].end());
      for (const std::uint32_t t : lists[hub])
        if (t != s) cand.insert(t);
      const std::uint32_t* l = graph->level0_list(s);
      const std::vector<std::uint32_t> got(l + 1, l + 1 + l[0]);
      // Invariants: no self link, no hub, no repeats, only candidates, at most (here exactly)
      // min(2M, candidates) links, the nearest candidate kept.
      CHECK(got.size() == std::min(cap, cand.size()));
      CHECK(std::set<std::uint32_t>(got.begin(), got.end()).size() == got.size());
      for (const std::uint32_t t : got) {
        CHECK(t != s);
        CHECK(t != hub);
        CHECK(cand.count(t) == 1);
      }
      const Ref ref = select_ref(storage, s, {cand.begin(), cand.end()}, cap, mode.second_order,
                                 mode.cover_rule);
      REQUIRE(!ref.kept.empty());
      CHECK(std::find(got.begin(), got.end(), ref.kept.front()) != got.end());
      // The same choice, laid out alike, unless a decision was a near tie.
      if (!ref.ambiguous) {
        CHECK(got == ref.kept);
        CHECK(graph->refill_start(s, l) == ref.chosen);
        ++compared;
      }
    }
    MESSAGE("lists compared with the float64 heuristic: " << compared << " of " << n - 1);
    CHECK(compared >= (n - 1) * 3 / 4);
  }
}

}  // namespace poincare::test
