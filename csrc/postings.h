// Summing a keyword index's per-(term, document) scores for one query: the columns of a
// term-major sparse (CSC) matrix, as bm25s stores them, added up per document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace poincare {

struct Postings {
  const std::int64_t* indptr = nullptr;  // n_terms + 1 offsets into indices / data
  std::size_t n_terms = 0;
  const std::int32_t* indices = nullptr;  // document of each posting
  const float* data = nullptr;            // score of each posting
  std::size_t n_postings = 0;
  std::size_t n_docs = 0;
};

// For the terms `terms` (each counted once per occurrence in the list), the documents with a
// nonzero sum of their postings' scores, in document order, as rows (doc_rows[document]) with
// the sums (float64), leaving out rows marked in `dead` (rows at or past n_dead are live).
// Throws InvalidArgument for a term, offset or document out of range.
void sum_postings(const Postings& postings, const std::int64_t* terms, std::size_t n_terms,
                  const std::int64_t* doc_rows, const std::uint8_t* dead, std::size_t n_dead,
                  std::vector<std::int64_t>& rows, std::vector<double>& sums);

}  // namespace poincare
