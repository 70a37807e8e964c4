// The graph walks of beam.h (beam_walk, greedy_descent) on small hand-built graphs through a link
// reader written here, which counts how often each node's list is read.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "beam.h"
#include "rank.h"
#include "support.h"

namespace poincare::test {
namespace {

using Graph = std::vector<std::vector<std::uint32_t>>;

// A link reader over adjacency lists; list() is called once per expansion (beam_walk) or per
// step (greedy_descent), so `reads` counts them.
class CountingReader {
 public:
  CountingReader(const Graph& graph, std::vector<int>& reads) : graph_(graph), reads_(reads) {}
  const std::uint32_t* list(std::uint32_t slot, SearchScratch&, std::size_t& count) const {
    ++reads_[slot];
    count = graph_[slot].size();
    return graph_[slot].data();
  }
  void prefetch(std::uint32_t) const {}

 private:
  const Graph& graph_;
  std::vector<int>& reads_;
};

// A result handler that records every offer; nodes flagged in `barred` are walked through but
// kept out of the beams (like KeepLive with deleted nodes).
struct Recorder {
  std::vector<std::uint8_t> barred;
  std::vector<int> offers;
  std::vector<std::uint8_t> offered_ok;
  bool eligible(std::uint32_t s) const { return barred[s] == 0; }
  template <typename Keys>
  void offer(std::uint32_t s, const Keys&, bool ok) {
    ++offers[s];
    offered_ok[s] = ok;
  }
  void also_prefetch(std::uint32_t) const {}
};

// A ring with a few random chords per node (directed, no self links, no repeats): connected.
Graph ring_with_chords(Rng& rng, std::size_t n, std::size_t chords) {
  Graph g(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i].push_back(static_cast<std::uint32_t>((i + 1) % n));
    g[i].push_back(static_cast<std::uint32_t>((i + n - 1) % n));
    while (g[i].size() < 2 + chords) {
      const auto t = static_cast<std::uint32_t>(rng.below(n));
      if (t != i && std::find(g[i].begin(), g[i].end(), t) == g[i].end()) g[i].push_back(t);
    }
  }
  return g;
}

// The slot nearest to q by |q - x|^2 a(x) in float64.
std::uint32_t nearest_ref(const VectorStorage& storage, const float* q) {
  std::uint32_t best = 0;
  double best_key = std::numeric_limits<double>::infinity();
  for (std::uint32_t s = 0; s < storage.slots(); ++s) {
    const float* x = storage.vector(s);
    const std::size_t dim = storage.dim();
    const double k = l2_ref(q, x, dim) * factor_ref(sq_norm_ref(x, dim), storage.curvature());
    if (k < best_key) {
      best_key = k;
      best = s;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("beam_walk with ef >= n: every node scored, offered and expanded exactly once") {
  Rng rng(41);
  const std::size_t n = 70, dim = 4;
  const double c = 1.0;
  const VectorStorage storage = storage_of(points(rng, n, dim, {0.1, 0.5, 0.8, 0.95, 0.999}, c),
                                           dim, c);
  const Graph graph = ring_with_chords(rng, n, 3);
  SearchScratch scratch;
  for (int walk = 0; walk < 6; ++walk) {  // one scratch over several walks (the epoch moves on)
    CAPTURE(walk);
    const auto q = point_at_radius(rng, dim, 0.3 + 0.1 * walk, c);
    std::vector<int> reads(n, 0);
    Recorder rec{std::vector<std::uint8_t>(n, 0), std::vector<int>(n, 0),
                 std::vector<std::uint8_t>(n, 0)};
    for (std::size_t s = 0; s < n; s += 5) rec.barred[s] = 1;
    const std::size_t n_eligible = n - (n + 4) / 5;
    const auto entry = static_cast<std::uint32_t>(rng.below(n));
    const CountingReader reader(graph, reads);
    beam_walk(reader, storage, PoincareRank<2>(storage, q.data(), 1.0f), entry, {n, n}, scratch,
              rec);
    for (std::size_t s = 0; s < n; ++s) {
      CAPTURE(s);
      CHECK(rec.offers[s] == 1);
      CHECK(rec.offered_ok[s] == (rec.barred[s] == 0));
      // Each node sits in both orders' frontiers, and is expanded once.
      CHECK(reads[s] == 1);
    }
    for (int o = 0; o < 2; ++o) {
      CAPTURE(o);
      const auto& beam = scratch.beams[o];
      REQUIRE(beam.size() == n_eligible);
      std::vector<std::uint8_t> in_beam(n, 0);
      for (const BeamEntry& e : beam) {
        CHECK(rec.barred[e.slot] == 0);
        CHECK(in_beam[e.slot] == 0);
        in_beam[e.slot] = 1;
        const float* x = storage.vector(e.slot);
        const double l2 = l2_ref(q.data(), x, dim);
        const double key = o == 0 ? l2 * factor_ref(sq_norm_ref(x, dim), c) : l2;
        CHECK(std::fabs(e.key - key) <= 1e-5 * key);
        CHECK(std::fabs(e.rank - l2 * factor_ref(sq_norm_ref(x, dim), c)) <= 1e-5 * e.rank);
      }
      // A heap with the worst on top.
      CHECK(std::is_heap(beam.begin(), beam.end()));
    }
    // beam_nodes: each node of the beams once, in slot order.
    std::vector<Candidate> nodes;
    beam_nodes(scratch, 2, nodes);
    CHECK(nodes.size() == n_eligible);
    CHECK(std::is_sorted(nodes.begin(), nodes.end(), [](const Candidate& a, const Candidate& b) {
      return a.second < b.second;
    }));
  }
}

TEST_CASE("beam_walk with a narrow beam reaches the nearest node, and greedy_descent stops at it") {
  // A 9 x 9 grid in the disc, 4-neighbour links, and above it a level of a few hubs linked to
  // each other and to everything (so the descent's first level reaches the nearest hub's basin).
  const std::size_t side = 9, n = side * side, dim = 2;
  const double c = 1.0;
  std::vector<float> rows;
  for (std::size_t i = 0; i < side; ++i)
    for (std::size_t j = 0; j < side; ++j) {
      rows.push_back(static_cast<float>(-0.68 + 0.17 * static_cast<double>(i)));
      rows.push_back(static_cast<float>(-0.68 + 0.17 * static_cast<double>(j)));
    }
  const VectorStorage storage = storage_of(rows, dim, c);
  Graph grid(n), complete(n);
  for (std::size_t i = 0; i < side; ++i)
    for (std::size_t j = 0; j < side; ++j) {
      auto& l = grid[i * side + j];
      if (i > 0) l.push_back(static_cast<std::uint32_t>((i - 1) * side + j));
      if (i + 1 < side) l.push_back(static_cast<std::uint32_t>((i + 1) * side + j));
      if (j > 0) l.push_back(static_cast<std::uint32_t>(i * side + j - 1));
      if (j + 1 < side) l.push_back(static_cast<std::uint32_t>(i * side + j + 1));
    }
  for (std::uint32_t s = 0; s < n; ++s)
    for (std::uint32_t t = 0; t < n; ++t)
      if (t != s) complete[s].push_back(t);
  Rng rng(7);
  SearchScratch scratch;
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    const auto q = point_at_radius(rng, dim, rng.uniform(0.0, 0.9), c);
    const std::uint32_t want = nearest_ref(storage, q.data());
    const PoincareRank<1> rank(storage, q.data(), 1.0f);

    // Beam of 3 from a corner over the grid alone.
    std::vector<int> reads(n, 0);
    Recorder rec{std::vector<std::uint8_t>(n, 0), std::vector<int>(n, 0),
                 std::vector<std::uint8_t>(n, 0)};
    const CountingReader grid_reader(grid, reads);
    beam_walk(grid_reader, storage, rank, 0, {3}, scratch, rec);
    const auto& beam = scratch.beams[0];
    REQUIRE(beam.size() == 3);
    const auto best = std::min_element(beam.begin(), beam.end());
    CHECK(best->slot == want);
    for (std::size_t s = 0; s < n; ++s) CHECK(reads[s] <= 1);
    CHECK(*std::max_element(rec.offers.begin(), rec.offers.end()) <= 1);

    // Greedy descent: level 2 is the complete graph, level 1 the grid; from the far corner.
    std::vector<int> up_reads(n, 0);
    const auto start = static_cast<std::uint32_t>(n - 1);
    float key = rank.score_one(start)[0];
    const float start_key = key;
    const std::uint32_t got = greedy_descent(
        [&](int level) { return CountingReader(level == 2 ? complete : grid, up_reads); },
        rank, start, 2, 0, scratch, &key);
    CHECK(got == want);
    CHECK(key == rank.score_one(got)[0]);
    CHECK(key <= start_key);
    // No grid neighbour of the result is nearer (it stopped at a minimum of level 1).
    for (const std::uint32_t t : grid[got]) CHECK(rank.score_one(t)[0] >= key);
  }
}

}  // namespace poincare::test
