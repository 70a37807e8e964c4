#include "postings.h"

#include <string>

#include "errors.h"

namespace poincare {

void sum_postings(const Postings& p, const std::int64_t* terms, std::size_t n_terms,
                  const std::int64_t* doc_rows, const std::uint8_t* dead, std::size_t n_dead,
                  std::vector<std::int64_t>& rows, std::vector<double>& sums) {
  rows.clear();
  sums.clear();
  for (std::size_t i = 0; i < n_terms; ++i) {
    const std::int64_t t = terms[i];
    if (t < 0 || static_cast<std::size_t>(t) >= p.n_terms)
      throw InvalidArgument("term " + std::to_string(t) + " is not in the postings");
    const std::int64_t lo = p.indptr[t], hi = p.indptr[t + 1];
    if (lo < 0 || hi < lo || static_cast<std::size_t>(hi) > p.n_postings)
      throw InvalidArgument("postings offsets of term " + std::to_string(t) + " are out of range");
  }
  for (std::size_t i = 0; i < n_terms; ++i)
    for (std::int64_t j = p.indptr[terms[i]]; j < p.indptr[terms[i] + 1]; ++j)
      if (p.indices[j] < 0 || static_cast<std::size_t>(p.indices[j]) >= p.n_docs)
        throw InvalidArgument("posting of document " + std::to_string(p.indices[j]) +
                              " is out of range");
  // Sums in a dense per-document array (kept all zero between calls), the documents touched
  // marked in a bitmap read back word by word: O(postings + documents / 64) and in document
  // order, where a pass over every document cost ~0.4 ms at 100,000 and a sort of the touched
  // ones O(postings log postings).
  thread_local std::vector<double> acc;
  thread_local std::vector<std::uint64_t> touched;
  if (acc.size() < p.n_docs) acc.resize(p.n_docs, 0.0);
  touched.assign((p.n_docs + 63) / 64, 0);
  for (std::size_t i = 0; i < n_terms; ++i) {
    for (std::int64_t j = p.indptr[terms[i]]; j < p.indptr[terms[i] + 1]; ++j) {
      const auto d = static_cast<std::size_t>(p.indices[j]);
      acc[d] += static_cast<double>(p.data[j]);
      touched[d >> 6] |= std::uint64_t{1} << (d & 63);
    }
  }
  std::size_t n_touched = 0;
  for (const std::uint64_t word : touched)
    n_touched += static_cast<std::size_t>(__builtin_popcountll(word));
  rows.reserve(n_touched);
  sums.reserve(n_touched);
  for (std::size_t w = 0; w < touched.size(); ++w) {
    for (std::uint64_t bits = touched[w]; bits != 0; bits &= bits - 1) {
      const std::size_t d = w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
      const double sum = acc[d];
      acc[d] = 0.0;
      const std::int64_t row = doc_rows[d];
      if (sum == 0.0) continue;
      if (row >= 0 && static_cast<std::size_t>(row) < n_dead && dead[row] != 0) continue;
      rows.push_back(row);
      sums.push_back(sum);
    }
  }
}

}  // namespace poincare
