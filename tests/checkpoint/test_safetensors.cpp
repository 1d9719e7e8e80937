// Safetensors: exact write -> read round trips for F32/BF16/F16, the header layout (sorted names,
// contiguous offsets, 8-byte alignment), atomic replacement, and one test per kind of corrupt file,
// each of which must throw tessera::Error naming the file (and the tensor where there is one).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using testing::random_floats;
using testing::scratch_dir;

using testing::write_raw;

// Opening `path` must throw an Error whose message names the file and contains every `part`.
void expect_open_error(const std::filesystem::path& path, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile file(path);
    FAIL() << "opening " << path << " did not throw";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

std::string n_bytes(size_t n) { return std::string(n, '\x01'); }

TEST(Safetensors, RoundTripsF32Bf16F16Exactly) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  std::vector<float> f32 = random_floats(12, 1);
  std::vector<bf16> b16;
  std::vector<f16> h16;
  for (float v : random_floats(6, 2, -100.0f, 100.0f)) b16.push_back(to_bf16(v));
  for (float v : random_floats(5, 3, -10.0f, 10.0f)) h16.push_back(to_f16(v));
  std::vector<int32_t> ids = {7, -3, 50256};
  float scalar = 2.5f;
  write_safetensors(path,
                    {{"w", DType::f32, {3, 4}, f32.data()},
                     {"b", DType::bf16, {2, 3}, b16.data()},
                     {"h", DType::f16, {5}, h16.data()},
                     {"ids", DType::i32, {3}, ids.data()},
                     {"scalar", DType::f32, {}, &scalar},
                     {"empty", DType::f32, {0, 4}, nullptr}},
                    {{"format", "pt"}, {"step", "12"}});

  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  EXPECT_EQ(file.read_f32("w"), f32);
  std::vector<float> b = file.read_f32("b"), h = file.read_f32("h");
  ASSERT_EQ(b.size(), 6u);
  ASSERT_EQ(h.size(), 5u);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], to_float(b16[i]));
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(h[i], to_float(h16[i]));
  EXPECT_EQ(file.read_f32("scalar"), std::vector<float>{2.5f});
  EXPECT_TRUE(file.read_f32("empty").empty());

  EXPECT_EQ(file.info("b").dtype, "BF16");
  EXPECT_EQ(file.info("h").type, DType::f16);
  EXPECT_EQ(file.info("w").shape, (Shape{3, 4}));
  EXPECT_EQ(file.info("scalar").shape, Shape{});
  std::span<const std::byte> raw = file.bytes("ids");
  ASSERT_EQ(raw.size(), 12u);
  EXPECT_EQ(std::memcmp(raw.data(), ids.data(), 12), 0);
  EXPECT_TRUE(file.contains("ids"));
  EXPECT_FALSE(file.contains("missing"));
  EXPECT_THROW(file.info("missing"), Error);
  EXPECT_THROW(file.read_f32("ids"), Error);  // I32 does not convert to fp32
}

TEST(Safetensors, HeaderIsSortedContiguousAndAligned) {
  std::filesystem::path dir = scratch_dir();
  std::vector<float> data(7, 1.0f);
  for (size_t name_length = 1; name_length <= 9; ++name_length) {
    std::filesystem::path path = dir / ("a" + std::to_string(name_length) + ".safetensors");
    write_safetensors(path, {{std::string(name_length, 'z'), DType::f32, {7}, data.data()},
                             {"a", DType::f16, {3}, data.data()}});
    std::string bytes = testing::read_text(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << name_length;
    EXPECT_EQ(bytes.size(), 8 + n + 6 + 28);
    std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find_last_of('}') + 1);  // only spaces after '}'

    SafetensorsFile file(path);
    ASSERT_EQ(file.tensors().size(), 2u);
    EXPECT_EQ(file.tensors()[0].name, "a");
    EXPECT_EQ(file.tensors()[0].begin, 0u);
    EXPECT_EQ(file.tensors()[0].end, 6u);
    EXPECT_EQ(file.tensors()[1].begin, 6u);
    EXPECT_EQ(file.tensors()[1].end, 34u);
  }
}

TEST(Safetensors, WriteReplacesAtomicallyAndLeavesNoTempFiles) {
  std::filesystem::path dir = scratch_dir();
  std::filesystem::path path = dir / "t.safetensors";
  std::vector<float> one(4, 1.0f), two(2, 2.0f);
  write_safetensors(path, {{"x", DType::f32, {4}, one.data()}});
  write_safetensors(path, {{"y", DType::f32, {2}, two.data()}});
  EXPECT_EQ(SafetensorsFile(path).read_f32("y"), two);
  EXPECT_FALSE(SafetensorsFile(path).contains("x"));
  // A rejected write leaves the previous file in place.
  EXPECT_THROW(write_safetensors(path, {{"x", DType::f32, {1}, one.data()}, {"x", DType::f32, {1}, one.data()}}),
               Error);
  EXPECT_EQ(SafetensorsFile(path).read_f32("y"), two);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
}

TEST(Safetensors, OtherDtypesAreListedButNotConverted) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path,
            R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]},)"
            R"("c":{"dtype":"F64","shape":[1],"data_offsets":[19,27]}})",
            n_bytes(27));
  SafetensorsFile file(path);
  EXPECT_EQ(file.tensors().size(), 3u);
  EXPECT_FALSE(file.info("a").type.has_value());
  EXPECT_EQ(file.info("c").element_size, 8u);
  EXPECT_EQ(file.bytes("b").size(), 3u);
  EXPECT_TRUE(file.metadata().empty());
  try {
    file.read_f32("a");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

TEST(SafetensorsCorrupt, ShorterThanEightBytes) {
  std::filesystem::path path = scratch_dir() / "short.safetensors";
  testing::write_text(path, "abcde");
  expect_open_error(path, {"too short"});
}

TEST(SafetensorsCorrupt, HeaderLengthPastEndOfFile) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  uint64_t n = 1000;
  testing::write_text(path, std::string(reinterpret_cast<const char*>(&n), 8) + "{}");
  expect_open_error(path, {"header length 1000"});
  n = ~uint64_t(0);
  testing::write_text(path, std::string(reinterpret_cast<const char*>(&n), 8) + "{}");
  expect_open_error(path, {"header length"});
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, "{\"a\": {\"dtype\": \"F32\",", "");
  expect_open_error(path, {"not valid JSON (error at byte"});
  // A number past a double's range: the JSON parser throws out_of_range, not parse_error (the fuzzer's
  // crash of 2026-11-28, header "8e60608e").
  write_raw(path, "8e60608e", "");
  expect_open_error(path, {"not valid JSON (a number out of range)"});
}

TEST(SafetensorsCorrupt, HeaderNotAnObject) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, "[1, 2, 3]", "");
  expect_open_error(path, {"expected an object"});
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", n_bytes(8));
  expect_open_error(path, {"'w'", "F33"});
}

TEST(SafetensorsCorrupt, NegativeShape) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, R"({"w":{"dtype":"F32","shape":[-2,1],"data_offsets":[0,8]}})", n_bytes(8));
  expect_open_error(path, {"'w'", "negative"});
}

TEST(SafetensorsCorrupt, OffsetsPastTheEnd) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", n_bytes(16));
  expect_open_error(path, {"'w'", "outside the data section"});
}

TEST(SafetensorsCorrupt, SizeDiffersFromShape) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", n_bytes(24));
  expect_open_error(path, {"'w'", "spans 24 bytes", "(2, 3)"});
}

TEST(SafetensorsCorrupt, OverlappingEntries) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
            n_bytes(20));
  expect_open_error(path, {"'a'", "'b'", "overlaps"});
}

TEST(SafetensorsCorrupt, TruncatedDataSection) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  std::vector<float> data = random_floats(64, 4);
  write_safetensors(path, {{"a", DType::f32, {32}, data.data()}, {"b", DType::f32, {32}, data.data() + 32}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  expect_open_error(path, {"'b'", "truncated"});
}

TEST(SafetensorsCorrupt, BadMetadataAndMissingFields) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  write_raw(path, R"({"__metadata__":{"format":3}})", "");
  expect_open_error(path, {"__metadata__"});
  write_raw(path, R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", n_bytes(4));
  expect_open_error(path, {"'w'", "shape"});
  write_raw(path, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", n_bytes(4));
  expect_open_error(path, {"'w'", "data_offsets"});
  write_raw(path, R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", n_bytes(4));
  expect_open_error(path, {"'w'", "not an integer"});
  expect_open_error(scratch_dir() / "absent.safetensors", {"no such file"});
}

}  // namespace
}  // namespace tessera
