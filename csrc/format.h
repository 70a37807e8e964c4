// Binary files of a saved index. Each file: a header (8-byte magic, format version, header size,
// sizes), little-endian payload arrays, and a trailer (CRC-32 of all bytes before it, end magic).
// Readers check magic, version, exact file size and checksum before parsing any offset, then
// validate every value (ids, flags, points inside the ball, graph links) before returning.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hnsw.h"
#include "storage.h"

namespace poincare::format {

// Version 2: level-0 lists of 2M links in place plus relocated lists (version 1 reserved 4
// repair slots in every list; its graph files are still read, and converted).
constexpr std::uint32_t kVersion = 2;
constexpr std::uint32_t kOldestVersion = 1;

// Writes ids, deletion flags and float32 vectors; fsyncs the file before returning.
void write_vectors(const std::string& path, const VectorStorage& storage);
// Reads a file written by write_vectors; throws FormatError (foreign, truncated, corrupt, other
// version) or IoError (cannot read).
VectorStorage read_vectors(const std::string& path);

// Writes the HNSW levels and links; fsyncs.
void write_graph(const std::string& path, const HnswGraph& graph);
// Reads a graph file and checks it describes `expected_nodes` nodes with valid links.
// deleted: per node (expected_nodes of them), nonzero when the storage marks it deleted.
std::unique_ptr<HnswGraph> read_graph(const std::string& path, std::size_t expected_nodes,
                                      const std::uint8_t* deleted);

}  // namespace poincare::format
