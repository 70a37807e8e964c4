// Binary files of a saved index. Each file: a header (8-byte magic, format version, header size,
// sizes), little-endian payload arrays, and a trailer (CRC-32 of all bytes before it, end magic).
// Readers check magic, version and size first and every byte's checksum before building anything
// from the file (a full load checksums as it reads, see file_frame.h), then validate every value
// (ids, flags, points inside the ball, graph links) before returning.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "file_frame.h"
#include "hnsw.h"
#include "storage.h"

namespace poincare::format {

// Writes ids, deletion flags, float32 vectors, rank factors and code rows (with their kind);
// fsyncs the file before returning.
void write_vectors(const std::string& path, const VectorStorage& storage);

// A loaded storage and, after a fast open, the block checksums its mapped arrays are verified
// against later (file null otherwise).
struct LoadedVectors {
  VectorStorage storage;
  BlockCheck check;
};
// Reads a file written by write_vectors; throws FormatError (foreign, truncated, corrupt, other
// version) or IoError (cannot read). mapped: a fast open (see file_frame.h): the vectors, rank
// factors and codes stay in the mapped file, checked by the caller's verify(); files of version 1
// are read in full all the same. Files before version 3 hold no codes (kind kNone). `pool`
// (optional): the threads a full load reads, checks and derives on.
LoadedVectors read_vectors(const std::string& path, bool mapped = false,
                           ThreadPool* pool = nullptr);

// Writes the HNSW levels and links; fsyncs.
void write_graph(const std::string& path, const HnswGraph& graph);

struct LoadedGraph {
  std::unique_ptr<HnswGraph> graph;
  BlockCheck check;
};
// Reads a graph file and checks it describes `expected_nodes` nodes with valid links.
// deleted: per node (expected_nodes of them), nonzero when the storage marks it deleted.
// mapped: the level-0 lists stay in the mapped file, and neither they nor the links are
// checked until verify() (HnswGraph::validate_heads, check_integrity). `pool` as for
// read_vectors.
LoadedGraph read_graph(const std::string& path, std::size_t expected_nodes,
                       const std::uint8_t* deleted, bool mapped = false,
                       ThreadPool* pool = nullptr);

}  // namespace poincare::format
