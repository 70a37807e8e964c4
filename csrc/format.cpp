#include "format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "errors.h"
#include "file_frame.h"

namespace poincare::format {

namespace {

constexpr char kVectorsMagic[8] = {'P', 'I', 'D', 'X', 'V', 'E', 'C', '\0'};
constexpr char kGraphMagic[8] = {'P', 'I', 'D', 'X', 'H', 'N', 'S', 'W'};

static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE-754 types required");

}  // namespace

void write_vectors(const std::string& path, const VectorStorage& s) {
  Writer w(path);
  start(w, kVectorsMagic);
  w.put<std::uint64_t>(s.dim());
  w.put<double>(s.curvature());
  w.put<std::uint64_t>(s.slots());
  w.put<std::int64_t>(s.id_high_water());
  w.put<std::uint32_t>(static_cast<std::uint32_t>(s.code_kind()));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(s.code_bytes()));
  w.patch_u32(12, static_cast<std::uint32_t>(w.size()));
  // Ids (held implicitly while they equal the slots) and deletion flags as saved, a chunk of
  // slots at a time: the writer streams, so no column of the whole index is built for it.
  constexpr std::size_t kChunk = 1 << 16;
  std::vector<std::int64_t> ids;
  for (std::size_t at = 0; at < s.slots(); at += kChunk) {
    ids.clear();
    for (std::size_t slot = at; slot < std::min(s.slots(), at + kChunk); ++slot)
      ids.push_back(s.id(slot));
    w.put_array(ids.data(), ids.size());
  }
  std::vector<std::uint8_t> deleted;
  for (std::size_t at = 0; at < s.slots(); at += kChunk) {
    deleted.clear();
    for (std::size_t slot = at; slot < std::min(s.slots(), at + kChunk); ++slot)
      deleted.push_back(s.is_deleted(slot) ? 1 : 0);
    w.put_array(deleted.data(), deleted.size());
  }
  w.pad_to(8);
  w.put_array(s.vectors(), s.slots() * s.dim());
  // Version 2: the rank factors, so a fast open maps them instead of reading every vector.
  w.put_array(s.rank_factors(), s.slots());
  // Version 3: the code rows, so a fast open maps them instead of coding every vector again.
  w.put_array(s.code_rows(), s.slots() * s.code_bytes());
  w.finish();
}

LoadedVectors read_vectors(const std::string& path, bool mapped, ThreadPool* pool) {
  if (!little_endian()) throw IoError("loading requires a little-endian machine");
  Reader r = mapped ? open_mapped(path, kVectorsMagic, "vectors")
                    : open_checked(path, kVectorsMagic, "vectors", pool);
  const auto dim = r.get<std::uint64_t>();
  const auto curvature = r.get<double>();
  const auto n = r.get<std::uint64_t>();
  const auto high_water = r.get<std::int64_t>();
  codes::CodeKind code_kind = codes::CodeKind::kNone;
  std::size_t code_bytes = 0;
  if (r.version() >= 3) {
    const auto kind = r.get<std::uint32_t>();
    code_bytes = r.get<std::uint32_t>();
    if (kind > static_cast<std::uint32_t>(codes::CodeKind::kSq8))
      r.fail("unknown code kind " + std::to_string(kind));
    code_kind = static_cast<codes::CodeKind>(kind);
    if (dim == 0 || dim > (1u << 20) || code_bytes != codes::row_bytes(code_kind, dim))
      r.fail("code rows of " + std::to_string(code_bytes) + " bytes do not fit the " +
             codes::kind_name(code_kind) + " kind at dimension " + std::to_string(dim));
  }
  if (dim == 0 || dim > (1u << 20)) r.fail("implausible dimension " + std::to_string(dim));
  if (!(curvature > 0) || !std::isfinite(curvature)) r.fail("invalid curvature");
  if (n > UINT32_MAX) r.fail("implausible number of points");
  auto ids = r.get_array<std::int64_t>(n);
  auto deleted = r.get_array<std::uint8_t>(n);
  r.skip_to_alignment(8);
  if (dim != 0 && n > SIZE_MAX / dim) r.fail("implausible size");
  try {
    if (r.mapped()) {
      // What was read so far (header, ids, flags) is checked now; the mapped arrays by verify().
      r.block_check().verify_range(0, r.position());
      // The header, ids and flags are copied out: their pages need not stay.
      r.block_check().file->release(r.block_check().file->data(), r.position());
      MappableArray<float> vectors, factors;
      MappableArray<std::uint8_t> code_rows;
      const float* pv = r.view_array<float>(n * dim);
      const float* pf = r.view_array<float>(n);
      const std::uint8_t* pc = r.view_array<std::uint8_t>(n * code_bytes);
      r.expect_end();
      vectors.map(r.block_check().file, pv, n * dim);
      factors.map(r.block_check().file, pf, n);
      code_rows.map(r.block_check().file, pc, n * code_bytes);
      return {VectorStorage::restore_mapped(dim, curvature, code_kind, std::move(vectors),
                                            std::move(factors), std::move(code_rows),
                                            std::move(ids), std::move(deleted), high_water),
              r.block_check()};
    }
    auto vectors = r.get_big_array<float>(n * dim);
    // Recomputed (and so checked) by restore(): the rank factors and the code rows.
    if (r.version() >= 2) r.skip_array<float>(n);
    if (r.version() >= 3) r.skip_array<std::uint8_t>(n * code_bytes);
    r.expect_end();
    return {VectorStorage::restore(dim, curvature, code_kind, std::move(vectors), std::move(ids),
                                   std::move(deleted), high_water),
            {}};
  } catch (const InvalidArgument& e) {
    throw FormatError(path + ": " + e.what());
  } catch (const FormatError& e) {
    const std::string what = e.what();
    throw FormatError(what.rfind(path, 0) == 0 ? what : path + ": " + what);
  }
}

void write_graph(const std::string& path, const HnswGraph& g) {
  Writer w(path);
  start(w, kGraphMagic);
  const auto& p = g.params();
  w.put<std::uint32_t>(static_cast<std::uint32_t>(p.M));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(p.ef_construction));
  w.put<std::uint64_t>(p.seed);
  w.put<std::int32_t>(g.max_level());
  w.put<std::uint32_t>(g.entry_point());
  w.put<std::uint64_t>(g.nodes());
  w.put<std::uint64_t>(g.relocated_links().size() / g.relocated_stride());
  w.patch_u32(12, static_cast<std::uint32_t>(w.size()));
  w.put_array(g.levels().data(), g.nodes());
  w.pad_to(4);
  w.put_array(g.level0_links().data(), g.level0_links().size());
  w.put_array(g.relocated_links().data(), g.relocated_links().size());
  w.put_array(g.upper_links().data(), g.upper_links().size());
  const std::vector<std::uint32_t> sources = g.repair_source_pairs();
  w.put<std::uint64_t>(sources.size() / 2);
  w.put_array(sources.data(), sources.size());
  const std::vector<std::uint16_t> refill = g.refill_starts();
  w.put_array(refill.data(), refill.size());
  w.finish();
}

LoadedGraph read_graph(const std::string& path, std::size_t expected_nodes,
                       const std::uint8_t* deleted, bool mapped, ThreadPool* pool) {
  if (!little_endian()) throw IoError("loading requires a little-endian machine");
  Reader r = mapped ? open_mapped(path, kGraphMagic, "graph")
                    : open_checked(path, kGraphMagic, "graph", pool);
  HnswParams p;
  p.M = static_cast<int>(r.get<std::uint32_t>());
  p.ef_construction = static_cast<int>(r.get<std::uint32_t>());
  p.seed = r.get<std::uint64_t>();
  const auto max_level = r.get<std::int32_t>();
  const auto entry = r.get<std::uint32_t>();
  const auto n = r.get<std::uint64_t>();
  const std::uint64_t n_relocated = r.version() >= 2 ? r.get<std::uint64_t>() : 0;
  if (p.M < 2 || p.M > 256 || p.ef_construction < 1) r.fail("invalid HNSW parameters");
  if (n_relocated > n) r.fail("more relocated link lists than nodes");
  if (n != expected_nodes)
    r.fail("graph has " + std::to_string(n) + " nodes but the vectors file has " +
           std::to_string(expected_nodes));
  if (max_level < -1 || max_level > HnswGraph::kMaxLevel) r.fail("invalid top level");
  auto levels = r.get_array<std::int8_t>(n);
  r.skip_to_alignment(4);
  if (r.mapped()) r.block_check().verify_range(0, r.position());
  const std::size_t stride0 = HnswGraph::level0_stride_for(p.M);
  MappableArray<std::uint32_t> level0;
  std::vector<std::uint32_t> relocated;
  const std::size_t level0_at = r.position();
  if (r.mapped()) {
    level0.map(r.block_check().file, r.view_array<std::uint32_t>(n * stride0), n * stride0);
    const std::size_t small = r.position();
    relocated = r.get_array<std::uint32_t>(n_relocated * HnswGraph::relocated_stride_for(p.M));
    r.block_check().verify_range(small, r.block_check().covered);  // relocated and upper lists
  } else if (r.version() >= 2) {
    level0 = r.get_big_array<std::uint32_t>(n * stride0);
    relocated = r.get_array<std::uint32_t>(n_relocated * HnswGraph::relocated_stride_for(p.M));
  } else {
    // Version 1 kept 2M + kRepairSlots slots in every list: lists over 2M are relocated.
    const std::size_t stride_v1 = HnswGraph::relocated_stride_for(p.M);
    const auto lists = r.get_array<std::uint32_t>(n * stride_v1);
    std::vector<std::uint32_t> in_place(n * stride0, 0);
    for (std::size_t s = 0; s < n; ++s) {
      const std::uint32_t* l = lists.data() + s * stride_v1;
      if (l[0] > stride_v1 - 1) r.fail("node " + std::to_string(s) + " has too many links");
      if (l[0] + 1 <= stride0) {
        std::copy(l, l + stride0, in_place.begin() + static_cast<std::ptrdiff_t>(s * stride0));
        continue;
      }
      in_place[s * stride0] =
          HnswGraph::kRelocated | static_cast<std::uint32_t>(relocated.size() / stride_v1);
      relocated.insert(relocated.end(), l, l + stride_v1);
    }
    level0.assign(in_place.begin(), in_place.end());
  }
  const std::size_t stride_up = 1 + static_cast<std::size_t>(p.M);
  std::size_t n_upper = 0;
  for (std::size_t s = 0; s < n; ++s) {
    if (levels[s] < 0 || levels[s] > HnswGraph::kMaxLevel || (levels[s] > max_level && !deleted[s]))
      r.fail("node " + std::to_string(s) + " has an invalid level");
    n_upper += static_cast<std::size_t>(levels[s]) * stride_up;
  }
  auto upper = r.get_array<std::uint32_t>(n_upper);
  // Version 2: the repair's sources (slot, source) pairs, so re-selections after a load keep
  // the links the repair gave, as before saving (version 1: none known).
  std::vector<std::uint32_t> sources;
  if (r.version() >= 2) {
    const auto n_sources = r.get<std::uint64_t>();
    if (n_sources > n) r.fail("more repair sources than nodes");
    sources = r.get_array<std::uint32_t>(2 * n_sources);
  }
  // Version 4: where each level-0 list's refill begins (earlier: no list has one).
  std::vector<std::uint16_t> refill;
  if (r.version() >= 4) refill = r.get_array<std::uint16_t>(n);
  r.expect_end();
  if (r.mapped()) {
    // Levels, relocated and upper lists and sources are copied out; only level 0 stays mapped.
    const MappedFile& file = *r.block_check().file;
    file.release(file.data(), level0_at);
    file.release(file.data() + level0_at + n * stride0 * sizeof(std::uint32_t),
                 file.size() - level0_at - n * stride0 * sizeof(std::uint32_t));
  }
  std::unique_ptr<HnswGraph> g;
  try {
    g = HnswGraph::restore(p, std::move(levels), std::move(level0), std::move(relocated),
                           std::move(upper), entry, max_level, !r.mapped());
    g->restore_repair_sources(sources);
    if (r.version() >= 4) g->restore_refill_starts(std::move(refill));
    if (r.mapped()) {  // level 0 is checked by verify(); what was read, now
      g->check_integrity(deleted, /*with_level0=*/false);
      return {std::move(g), r.block_check()};
    }
    g->check_integrity(deleted);
  } catch (const InvalidArgument& e) {
    throw FormatError(path + ": " + e.what());
  } catch (const FormatError& e) {
    throw FormatError(path + ": " + e.what());
  }
  return {std::move(g), {}};
}

}  // namespace poincare::format
