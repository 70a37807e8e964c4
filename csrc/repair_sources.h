// Which node holds the in-link the connectivity repair gave a node: sparse, since only a few
// percent of the nodes ever get one, and read on every re-selection of a full list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace poincare {

class RepairSources {
 public:
  static constexpr std::uint32_t kNone = UINT32_MAX;

  // Covers slots [0, n); new slots have no source.
  void resize(std::size_t n) {
    bits_.resize((n + 63) / 64, 0);
    n_ = n;
  }
  void reserve(std::size_t n) { bits_.reserve((n + 63) / 64); }
  std::size_t size() const { return n_; }

  // The node that gave `slot` its repair link, or kNone. A bit per slot answers "none" without
  // touching the map, so concurrent insertions (which only read) pay one load per old link.
  std::uint32_t get(std::uint32_t slot) const {
    if (slot >= n_ || ((bits_[slot >> 6] >> (slot & 63)) & 1) == 0) return kNone;
    return sources_.find(slot)->second;
  }
  // Sets (or, with kNone, clears) the source of a slot below size(); not concurrent with get().
  void set(std::uint32_t slot, std::uint32_t source) {
    if (slot >= n_) return;
    const std::uint64_t bit = std::uint64_t{1} << (slot & 63);
    if (source == kNone) {
      bits_[slot >> 6] &= ~bit;
      sources_.erase(slot);
    } else {
      bits_[slot >> 6] |= bit;
      sources_[slot] = source;
    }
  }
  // Calls f(slot, source) for every slot with a source (any order).
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [slot, source] : sources_) f(slot, source);
  }
  // Bytes held (libstdc++ node: next pointer and the pair, rounded to 32 by malloc; a bucket is
  // a pointer).
  std::size_t bytes() const {
    return bits_.capacity() * sizeof(std::uint64_t) +
           (sources_.empty() ? 0 : sources_.bucket_count() * sizeof(void*) + sources_.size() * 32);
  }

 private:
  std::vector<std::uint64_t> bits_;
  std::unordered_map<std::uint32_t, std::uint32_t> sources_;
  std::size_t n_ = 0;
};

}  // namespace poincare
