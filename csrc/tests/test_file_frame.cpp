// The binary file framing (file_frame.h) and the vectors file on it (format.h): a round trip, and
// every truncation and every single-bit flip of a written file refused with FormatError, by the
// full load and (for the payload) by a fast open's verify.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "crc32.h"
#include "errors.h"
#include "file_frame.h"
#include "format.h"
#include "support.h"
#include "thread_pool.h"

namespace poincare::test {
namespace {

// A fresh directory under $TMPDIR (or /tmp), removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/poincare_ctest_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    for (const auto& f : files_) std::remove(f.c_str());
    ::rmdir(path_.c_str());
  }
  std::string file(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void dump(const std::string& path, const std::vector<unsigned char>& bytes, std::size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
}

constexpr char kMagic[8] = {'T', 'E', 'S', 'T', 'F', 'R', 'M', '\0'};

}  // namespace

TEST_CASE("crc32_combine: the CRC of a concatenation from its parts' CRCs") {
  Rng rng(5);
  std::vector<unsigned char> bytes(5000);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng.next() & 0xffu);
  CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u);  // the CRC-32 check value
  for (const std::size_t split : {0, 1, 7, 8, 9, 255, 256, 1000, 4999, 5000}) {
    CAPTURE(split);
    const std::uint32_t a = crc32_update(0, bytes.data(), split);
    const std::uint32_t b = crc32_update(0, bytes.data() + split, bytes.size() - split);
    CHECK(crc32_combine(a, b, bytes.size() - split) == crc32_update(0, bytes.data(), bytes.size()));
  }
}

TEST_CASE("file framing: round trip, and every truncation and bit flip is a FormatError") {
  TempDir dir;
  const std::string good = dir.file("frame.bin"), bad = dir.file("bad.bin");
  const std::vector<std::int64_t> ids = {3, -5, 1LL << 40, 0, 7};
  const std::vector<float> xs = {0.25f, -0.5f, 1e-30f, 3.0f};
  {
    format::Writer w(good);
    format::start(w, kMagic);
    w.put<std::uint64_t>(ids.size());
    w.patch_u32(12, static_cast<std::uint32_t>(w.size()));
    w.put_array(ids.data(), ids.size());
    w.pad_to(8);
    w.put_array(xs.data(), xs.size());
    w.finish();
  }
  auto check_payload = [&](format::Reader& r) {
    REQUIRE(r.version() == format::kVersion);
    REQUIRE(r.get<std::uint64_t>() == ids.size());
    CHECK(r.get_array<std::int64_t>(ids.size()) == ids);
    r.skip_to_alignment(8);
    CHECK(r.get_array<float>(xs.size()) == xs);
    r.expect_end();
    CHECK_THROWS_AS(r.get<std::uint8_t>(), FormatError);  // nothing past the payload
  };
  {
    format::Reader r = format::open_checked(good, kMagic, "test");
    check_payload(r);
  }
  {
    format::Reader r = format::open_mapped(good, kMagic, "test");
    CHECK(r.mapped());
    r.block_check().verify_all();
    check_payload(r);
  }
  // A foreign magic is refused too.
  constexpr char other[8] = {'O', 'T', 'H', 'E', 'R', 'M', 'G', '\0'};
  CHECK_THROWS_AS(format::open_checked(good, other, "test"), FormatError);

  // A streamed read checks as it goes: the damage is found by the time the payload is consumed.
  auto read_through = [&](const std::string& path) {
    format::Reader r = format::open_checked(path, kMagic, "test");
    r.get<std::uint64_t>();
    r.get_array<std::int64_t>(ids.size());
    r.skip_to_alignment(8);
    r.get_array<float>(xs.size());
    r.expect_end();
  };
  const auto bytes = slurp(good);
  REQUIRE(bytes.size() > format::kPrefix + format::kTrailer);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    dump(bad, bytes, n);
    CHECK_THROWS_AS(format::open_checked(bad, kMagic, "test"), FormatError);  // no end marker
    CHECK_THROWS_AS(format::open_mapped(bad, kMagic, "test"), FormatError);
  }
  for (std::size_t bit = 0; bit < 8 * bytes.size(); ++bit) {
    CAPTURE(bit);
    auto flipped = bytes;
    flipped[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    dump(bad, flipped, flipped.size());
    CHECK_THROWS_AS(read_through(bad), FormatError);
  }
}

TEST_CASE("file framing: a big array read in parallel pieces, and a flip in any piece refused") {
  TempDir dir;
  const std::string good = dir.file("big.bin"), bad = dir.file("bad.bin");
  // 20 MiB + a bit: three pieces of a streamed read, the last one short, across 21 blocks.
  const std::size_t n = (std::size_t{20} << 20) / 4 + 1000;
  std::vector<std::uint32_t> values(n);
  Rng rng(17);
  for (auto& v : values) v = static_cast<std::uint32_t>(rng.next());
  {
    format::Writer w(good);
    format::start(w, kMagic);
    w.put<std::uint64_t>(n);
    w.patch_u32(12, static_cast<std::uint32_t>(w.size()));
    w.put<std::uint8_t>(7);  // the array starts mid-block, off any piece boundary
    w.pad_to(4);
    w.put_array(values.data(), n);
    w.finish();
  }
  ThreadPool pool(2);
  auto read_all = [&](const std::string& path, ThreadPool* p) {
    format::Reader r = format::open_checked(path, kMagic, "test", p);
    const auto count = r.get<std::uint64_t>();
    CHECK(r.get<std::uint8_t>() == 7);
    r.skip_to_alignment(4);
    MappableArray<std::uint32_t> got = r.get_big_array<std::uint32_t>(count);
    r.expect_end();
    return got;
  };
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const MappableArray<std::uint32_t> got = read_all(good, p);
    REQUIRE(got.size() == n);
    CHECK(std::equal(values.begin(), values.end(), got.data()));
  }
  const auto bytes = slurp(good);
  for (const std::size_t at : {std::size_t{40}, std::size_t{9} << 20, bytes.size() - 200}) {
    CAPTURE(at);
    auto flipped = bytes;
    flipped[at] ^= 0x10u;
    dump(bad, flipped, flipped.size());
    CHECK_THROWS_WITH_AS(read_all(bad, &pool), doctest::Contains("checksum mismatch"), FormatError);
  }
  // A damaged count makes the array run past the end: reported as the damage it is.
  auto flipped = bytes;
  flipped[format::kPrefix + 7] ^= 0x01u;
  dump(bad, flipped, flipped.size());
  CHECK_THROWS_WITH_AS(read_all(bad, &pool), doctest::Contains("checksum mismatch"), FormatError);
}

TEST_CASE("vectors file: round trip, and corruption refused by the full load and by verify") {
  TempDir dir;
  const std::string good = dir.file("vectors.bin"), bad = dir.file("bad.bin");
  Rng rng(29);
  const std::size_t dim = 3, n = 6;
  VectorStorage storage = storage_of(points(rng, n, dim, {0.1, 0.9, 0.9999999}, 1.0), dim, 1.0);
  REQUIRE(storage.remove(4));
  format::write_vectors(good, storage);
  auto same = [&](const VectorStorage& s) {
    REQUIRE(s.slots() == n);
    CHECK(s.live() == n - 1);
    CHECK(s.is_deleted(4));
    for (std::size_t i = 0; i < n * dim; ++i) CHECK(s.vectors()[i] == storage.vectors()[i]);
    for (std::size_t i = 0; i < n; ++i) CHECK(s.rank_factor(i) == storage.rank_factor(i));
  };
  same(format::read_vectors(good).storage);
  {
    auto loaded = format::read_vectors(good, true);
    loaded.check.verify_all();
    same(loaded.storage);
  }

  const auto bytes = slurp(good);
  // The payload a fast open's block table covers: everything but the table and the trailer.
  const std::size_t covered = bytes.size() - format::kTrailer - 20 - 4;
  std::size_t caught_at_open = 0, caught_by_verify = 0;
  for (std::size_t bit = 0; bit < 8 * bytes.size(); ++bit) {
    CAPTURE(bit);
    auto flipped = bytes;
    flipped[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    dump(bad, flipped, flipped.size());
    CHECK_THROWS_AS(format::read_vectors(bad), FormatError);
    if (bit / 8 >= covered) continue;  // the fast open leaves the trailer's file CRC unread
    try {
      auto loaded = format::read_vectors(bad, true);
      CHECK_THROWS_AS(loaded.check.verify_all(), FormatError);
      ++caught_by_verify;
    } catch (const FormatError&) {
      ++caught_at_open;
    }
  }
  // One block here (1 MiB): the fast open checks the block it reads the header from, which is all.
  CHECK(caught_at_open + caught_by_verify == 8 * covered);
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    CAPTURE(len);
    dump(bad, bytes, len);
    CHECK_THROWS_AS(format::read_vectors(bad), FormatError);
    CHECK_THROWS_AS(format::read_vectors(bad, true), FormatError);
  }

  // Past the first block a fast open reads nothing: a flip there is found by verify().
  const std::size_t big_dim = 64, big_n = 6000;  // 1.5 MB of coordinates: two blocks
  const VectorStorage big = storage_of(points(rng, big_n, big_dim, {0.3, 0.99}, 1.0), big_dim, 1.0);
  const std::string big_path = dir.file("big.bin");
  format::write_vectors(big_path, big);
  const auto big_bytes = slurp(big_path);
  REQUIRE(big_bytes.size() > format::kBlockBytes + 4096);
  for (int k = 0; k < 8; ++k) {
    const std::size_t at =
        format::kBlockBytes + rng.below(big_bytes.size() - format::kBlockBytes - 4096);
    CAPTURE(at);
    auto flipped = big_bytes;
    flipped[at] ^= static_cast<unsigned char>(1u << rng.below(8));
    dump(bad, flipped, flipped.size());
    CHECK_THROWS_AS(format::read_vectors(bad), FormatError);
    auto loaded = format::read_vectors(bad, true);
    CHECK_NOTHROW(loaded.check.verify_range(0, format::kBlockBytes));  // the first block is intact
    CHECK_THROWS_AS(loaded.check.verify_all(), FormatError);
  }
}

}  // namespace poincare::test
