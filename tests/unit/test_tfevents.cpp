// TensorBoard event files written by hand: CRC-32C, TFRecord framing, protobuf bytes, and the
// writer's lazy file (integration.tensorboard decodes real files with python3-protobuf).
#include <catch2/catch.hpp>

#include "fake_executor.hpp"
#include "report/tfevents.hpp"
#include "trial/result_log.hpp"
#include "util/fs.hpp"

using namespace tune;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {
uint32_t le32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}
}  // namespace

TEST_CASE("CRC-32C and its TFRecord mask", "[tfevents]") {
  CHECK(report::crc32c("123456789") == 0xE3069283u);  // the standard check value
  CHECK(report::crc32c("") == 0u);
  CHECK(report::masked_crc(0) == 0xA282EAD8u);
  std::string rec = report::tfrecord("abc");
  REQUIRE(rec.size() == 8 + 4 + 3 + 4);
  CHECK(rec.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(le32(rec, 8) == report::masked_crc(report::crc32c(rec.substr(0, 8))));
  CHECK(rec.substr(12, 3) == "abc");
  CHECK(le32(rec, 15) == report::masked_crc(report::crc32c("abc")));
}

TEST_CASE("Event bytes: wall_time, step, file_version, summary of tag/simple_value", "[tfevents]") {
  std::string v = report::version_event(0);
  CHECK(v == std::string("\x09\0\0\0\0\0\0\0\0\x1a\x0d"
                         "brain.Event:2",
                         24));
  std::string e = report::scalars_event(0, 300, {{"a", 1.0f}});
  // 09 <8 bytes> | 10 ac 02 (step 300) | 2a 0a (summary) 0a 08 (value) 0a 01 'a' 15 <float 1.0>
  std::string want(
      "\x09\0\0\0\0\0\0\0\0\x10\xac\x02\x2a\x0a\x0a\x08\x0a\x01"
      "a\x15\0\0\x80\x3f",
      24);
  CHECK(e == want);
}

TEST_CASE("the scalars of a result: numbers, flattened, no bookkeeping or booleans", "[tfevents]") {
  auto s = report::result_scalars({{"loss", 0.5},
                                   {"m", {{"acc", 1}}},
                                   {"flag", true},
                                   {"name", "x"},
                                   {"training_iteration", 3},
                                   {"pid", 9}});
  std::vector<std::pair<std::string, float>> want = {{"loss", 0.5f}, {"m/acc", 1.0f}};
  CHECK(s == want);
}

TEST_CASE("the event file is made at the first flush with something to write", "[tfevents]") {
  testing::ScratchDir d;
  {
    report::EventWriter w(d.path, "host/../x");
    REQUIRE(w.flush());
    w.add(json{{"no_iteration", 1}});
    REQUIRE(w.flush());
    CHECK(fs::is_empty(d.path));  // nothing worth a file yet
    w.add(json{{"training_iteration", 1}, {"loss", 0.5}});
    w.add(json{{"training_iteration", 2}, {"loss", 0.25}});
    REQUIRE(w.flush());
    REQUIRE_FALSE(w.path().empty());
    CHECK(w.path().parent_path() == d.path);
    CHECK(w.path().filename().string().starts_with("events.out.tfevents."));
    auto text = util::read_file(w.path());
    REQUIRE(text);
    size_t records = 0;
    for (size_t at = 0; at < text->size(); ++records) {
      uint64_t len = le32(*text, at);
      at += 12 + len + 4;
    }
    CHECK(records == 3);  // the version record, then one per result
  }
  report::EventWriter again(d.path, "host");  // the same second: a name of its own
  again.add(json{{"training_iteration", 1}, {"loss", 0.5}});
  REQUIRE(again.flush());
  size_t files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(d.path)) ++files;
  CHECK(files == 2);
}

TEST_CASE("a ResultLog feeds its sink and flushes it with the result files", "[tfevents]") {
  testing::ScratchDir d;
  trial::ResultLog log;
  REQUIRE(log.open(d.path));
  log.set_sink(std::make_unique<report::EventWriter>(d.path, "h"));
  CHECK(log.has_sink());
  log.append(json{{"training_iteration", 1}, {"loss", 0.5}});
  REQUIRE(log.flush());
  size_t events = 0;
  for (auto& e : fs::directory_iterator(d.path))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) ++events;
  CHECK(events == 1);
  log.close();
  CHECK_FALSE(log.has_sink());
}
