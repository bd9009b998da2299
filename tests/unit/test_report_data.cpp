// The report's data layer: the fast result-row scanner (checked against the full JSON parser on
// tricky lines and on every prefix of them), base64, the curves' binary columns, and the
// scheduler's decisions read back from a state and pbt_policy.jsonl.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <random>

#include "fake_executor.hpp"
#include "report/decisions.hpp"
#include "report/row_scan.hpp"
#include "report/series.hpp"
#include "state/state.hpp"
#include "util/base64.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"

using namespace tune;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// What the full parser makes of a line, in the scanner's terms (false: not an object).
bool reference(const std::string& line, std::vector<std::pair<std::string, double>>& nums,
               std::vector<std::string>& keys) {
  json j = util::parse_json_ext(line, 64);
  if (j.is_discarded() || !j.is_object()) return false;
  for (const auto& [k, v] : j.items()) {
    keys.push_back(k);
    if (v.is_number()) nums.emplace_back(k, v.get<double>());
  }
  return true;
}

bool same_double(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// The scanner either declines `line` or reads exactly what the full parser reads.
void check_agrees(const std::string& line) {
  std::vector<report::RowField> fields;
  if (!report::scan_row(line, fields)) return;
  std::vector<std::pair<std::string, double>> nums;
  std::vector<std::string> keys;
  INFO(line);
  REQUIRE(reference(line, nums, keys));  // accepted: must be valid
  REQUIRE(fields.size() == keys.size());
  size_t n = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    CHECK(fields[i].key == keys[i]);
    if (!fields[i].is_number) continue;
    REQUIRE(n < nums.size());
    CHECK(nums[n].first == fields[i].key);
    CHECK(same_double(nums[n].second, fields[i].value));
    ++n;
  }
  CHECK(n == nums.size());
}

const std::vector<std::string> kLines = {
    R"({"training_iteration": 3, "loss": 0.25, "acc": -1.5e-3, "done": false})",
    R"({"b": 1, "a": 2, "config": {"lr": 0.1, "x": [1, 2, {"y": null}]}, "s": "q\"\\\/\b\f\n\r\t\u00e9"})",
    R"({"loss": NaN, "up": Infinity, "down": -Infinity, "n": null, "t": true})",
    R"(  {"k" : -0 , "big": 123456789012345678901234567890, "e": 1E+2, "f": 0.5e-1}  )",
    R"({"a": 1, "a": "x"})",  // repeated key: the full parser decides
    R"({"k\u0041": 1})",      // escape in a key
    "{\"caf\xC3\xA9\": 1}",   // UTF-8 in a key
    R"({"a": 01})",           // invalid number
    R"({"a": 1.})",           // invalid number
    R"({"a": .5})",           // invalid number
    R"({"a": [1, NaN]})",     // NaN inside a value
    R"({"a": 1} x)",          // trailing garbage
    R"([1, 2])",              // not an object
    R"({})",
    R"({"a": 1e400})",               // beyond double
    R"({"s": "tab	inside"})",  // a raw control character in a string
};

}  // namespace

TEST_CASE("the row scanner reads what the full parser reads, or declines", "[report]") {
  for (const auto& line : kLines) check_agrees(line);
  std::vector<report::RowField> f;
  REQUIRE(report::scan_row(kLines[0], f));
  REQUIRE(f.size() == 4);
  CHECK(f[0].key == "acc");  // sorted by key, as the full parser's objects
  CHECK(f[1].key == "done");
  CHECK_FALSE(f[1].is_number);
  CHECK(f[2].key == "loss");
  CHECK(f[3].key == "training_iteration");
  CHECK(f[3].integer);
  CHECK_FALSE(f[2].integer);
  CHECK_FALSE(report::scan_row(kLines[4], f));   // repeated key
  CHECK_FALSE(report::scan_row(kLines[5], f));   // escaped key
  CHECK_FALSE(report::scan_row(kLines[12], f));  // an array
}

namespace {
// Lines with UTF-8 text: a metric named "précision", a string value "日本", a 4-byte emoji key,
// keys that sort by their bytes.
const std::vector<std::string> kUtf8Lines = {
    "{\"training_iteration\": 2, \"pr\xC3\xA9\x63ision\": 0.5, \"name\": "
    "\"\xE6\x97\xA5\xE6\x9C\xAC\"}",
    "{\"\xF0\x9F\x9A\x80\": 1, \"z\": 2, \"\xC3\xA9\": 3, \"a\": {\"\xE6\x97\xA5\": "
    "[\"\xE6\x9C\xAC\"]}}",
    "{\"s\": \"\xEF\xBF\xBF \xF4\x8F\xBF\xBF \xED\x9F\xBF \xE0\xA0\x80 \xC2\x80\", \"x\": 1}",
};
// Bytes that are not well-formed UTF-8, in a key or in a string value.
const std::vector<std::string> kBadUtf8Lines = {
    "{\"a\x80\": 1}",                       // a stray continuation byte
    "{\"a\": \"\xC0\xAF\"}",                // overlong '/'
    "{\"a\": \"\xE0\x80\xAF\"}",            // overlong, 3 bytes
    "{\"a\": \"\xED\xA0\x80\", \"b\": 1}",  // a surrogate
    "{\"a\": \"\xF4\x90\x80\x80\"}",        // above U+10FFFF
    "{\"a\": \"\xE6\x97\"}",                // cut short by the quote
    "{\"\xE6\x97\xA5\xE6\": 1}",            // cut short in a key
    "{\"a\": \"\xFF\"}",                    // never in UTF-8
    "{\"a\": [\"\xF8\x88\x80\x80\x80\"]}",  // 5-byte form, nested
};
}  // namespace

TEST_CASE("the row scanner reads UTF-8 keys and strings, and declines what is not UTF-8",
          "[report]") {
  std::vector<report::RowField> f;
  for (const auto& line : kUtf8Lines) {
    INFO(line);
    CHECK(report::scan_row(line, f));  // the fast path
    check_agrees(line);
  }
  REQUIRE(report::scan_row(kLines[6], f));
  REQUIRE(f.size() == 1);
  CHECK(f[0].key == "caf\xC3\xA9");
  REQUIRE(report::scan_row(kUtf8Lines[0], f));
  REQUIRE(f.size() == 3);
  CHECK(f[0].key == "name");
  CHECK_FALSE(f[0].is_number);
  CHECK(f[1].key == "pr\xC3\xA9\x63ision");
  CHECK(f[1].value == 0.5);
  CHECK(f[2].key == "training_iteration");
  REQUIRE(report::scan_row(kUtf8Lines[1], f));
  REQUIRE(f.size() == 4);
  CHECK(f[0].key == "a");  // byte order, as the full parser's objects
  CHECK(f[1].key == "z");
  CHECK(f[2].key == "\xC3\xA9");
  CHECK(f[3].key == "\xF0\x9F\x9A\x80");
  for (const auto& line : kBadUtf8Lines) {
    INFO(line);
    CHECK_FALSE(report::scan_row(line, f));
    std::vector<std::pair<std::string, double>> nums;
    std::vector<std::string> keys;
    CHECK_FALSE(reference(line, nums, keys));  // the full parser rejects it too
  }
  // Every prefix (a torn write, cut inside a multi-byte sequence too) agrees or declines.
  for (const auto& line : kUtf8Lines)
    for (size_t cut = 0; cut <= line.size(); ++cut) check_agrees(line.substr(0, cut));
}

TEST_CASE("the row scanner on UTF-8 lines with random bytes changed agrees or declines",
          "[report]") {
  // Seeded: the same 6,000 mutations each run. Bytes are drawn from those that matter here:
  // UTF-8 lead and continuation bytes, quotes, backslashes, digits and ASCII letters.
  std::mt19937 rng(16);
  const unsigned char pool[] = {0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF,
                                0xF0, 0xF4, 0xF5, 0xFF, '"',  '\\', '0',  '9',  'a',  ' '};
  std::vector<report::RowField> f;
  size_t accepted = 0;
  for (int n = 0; n < 6000; ++n) {
    std::string line = kUtf8Lines[n % kUtf8Lines.size()];
    for (int k = 0; k <= n % 3; ++k)
      line[rng() % line.size()] = static_cast<char>(pool[rng() % sizeof pool]);
    check_agrees(line);
    accepted += report::scan_row(line, f) ? 1 : 0;
  }
  CHECK(accepted > 200);  // the fast path was exercised (292 of 6,000), not only declined
}

TEST_CASE("utf8_sequence_at and invalid_utf8_at agree with a decoder's rules", "[util]") {
  CHECK(util::utf8_sequence_at("a", 0) == 1);
  CHECK(util::utf8_sequence_at("\xC3\xA9", 0) == 2);
  CHECK(util::utf8_sequence_at("\xE6\x97\xA5", 0) == 3);
  CHECK(util::utf8_sequence_at("\xF0\x9F\x9A\x80", 0) == 4);
  CHECK(util::utf8_sequence_at("\xF0\x9F\x9A", 0) == 0);  // cut short
  CHECK(util::utf8_sequence_at("\xC1\xBF", 0) == 0);      // overlong
  CHECK(util::utf8_sequence_at("\xED\xB0\x80", 0) == 0);  // surrogate
  CHECK(util::utf8_sequence_at("\x80", 0) == 0);
  CHECK(util::invalid_utf8_at("ok \xE6\x97\xA5") == std::string_view::npos);
  CHECK(util::invalid_utf8_at("ok \xE6\x97 x") == 3);
  // Every 2-byte value: valid exactly when nlohmann's parser accepts it inside a string.
  for (int a = 0x80; a < 0x100; ++a)
    for (int b = 0; b < 0x100; ++b) {
      std::string two{static_cast<char>(a), static_cast<char>(b)};
      bool ours = util::invalid_utf8_at(two) == std::string_view::npos;
      bool theirs = !json::parse("\"" + two + "\"", nullptr, false).is_discarded();
      if (b == '"' || b == '\\' || b < 0x20) continue;  // JSON's own rules, not UTF-8's
      INFO(a << " " << b);
      CHECK(ours == theirs);
    }
}

TEST_CASE("the row scanner on every prefix of a line (a torn write) agrees or declines",
          "[report]") {
  for (const auto& line : {kLines[0], kLines[1], kLines[2], kLines[3]})
    for (size_t cut = 0; cut <= line.size(); ++cut) check_agrees(line.substr(0, cut));
}

TEST_CASE("base64 as RFC 4648 defines it", "[report][util]") {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"},
                                                         {std::string("\xff\x00\xfe", 3), "/wD+"}};
  for (const auto& [in, want] : vectors) {
    std::string out = "x";
    util::base64_encode(in, out);
    CHECK(out == "x" + want);
    CHECK(util::base64_decode(want) == in);
  }
}

TEST_CASE("base64 decodes every byte back, and refuses what is not base64", "[util]") {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 1 + n / 3) {
    std::string enc;
    util::base64_encode(all.substr(0, n), enc);
    CHECK(util::base64_decode(enc) == all.substr(0, n));
  }
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v=g==", "Zm9\\", "Zm 9", "=Zm9", "Zg==Zg=="})
    CHECK_FALSE(util::base64_decode(bad).has_value());
}

namespace {

template <typename T>
T read_le(const std::string& blob, size_t off) {
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  U u = 0;
  for (size_t b = 0; b < sizeof(U); ++b)
    u |= U(static_cast<unsigned char>(blob.at(off + b))) << (8 * b);
  return std::bit_cast<T>(u);
}

}  // namespace

TEST_CASE("curves become aligned little-endian columns; x as a run when it is one", "[report]") {
  report::Series run;
  run.x = {5, 6, 7};
  run.y["loss"] = {0.5, NAN, 1e300};
  run.y["acc"] = {1, 2, 3};
  std::string blob = "z";  // an odd start: the columns are aligned all the same
  json where = report::append_columns(run, blob);
  CHECK(where["n"] == 3);
  CHECK(where["x0"] == 5);
  CHECK_FALSE(where.contains("xo"));
  size_t loss = where["y"]["loss"];
  CHECK(loss % 4 == 0);
  CHECK(read_le<float>(blob, loss) == 0.5f);
  CHECK(std::isnan(read_le<float>(blob, loss + 4)));                           // a gap stays a gap
  CHECK(read_le<float>(blob, loss + 8) == std::numeric_limits<float>::max());  // clamped
  CHECK(read_le<float>(blob, size_t(where["y"]["acc"]) + 8) == 3.0f);

  report::Series odd;
  odd.x = {1, 2, 4.5};
  odd.x_integer = false;
  odd.y["m"] = {1, 2, 3};
  json w2 = report::append_columns(odd, blob);
  REQUIRE(w2.contains("xo"));
  size_t xo = w2["xo"];
  CHECK(xo % 8 == 0);
  CHECK(read_le<double>(blob, xo + 16) == 4.5);

  report::Series gap;  // integers, but not consecutive
  gap.x = {1, 2, 4};
  CHECK(report::append_columns(gap, blob).contains("xo"));
  report::Series empty;
  CHECK(report::append_columns(empty, blob) == json{{"n", 0}, {"x0", 0}, {"y", json::object()}});
}

TEST_CASE("a result.json read through the scanner and the full parser alike", "[report]") {
  testing::ScratchDir d;
  {
    std::ofstream out(d.path / "result.json");
    out << R"({"training_iteration": 1, "loss": 3, "note": "caf)"
        << "\xC3\xA9"
        << R"("})"
        << "\n"
        << R"({"training_iteration": 2, "loss": 2, "loss": 9})"
        << "\n"  // full parser: last wins
        << R"({"training_iteration": true, "loss": 1})"
        << "\n"  // no numeric iteration
        << R"({"training_iteration": 3.5, "loss": 1})"
        << "\n";
  }
  auto s = report::read_series(d.path);
  CHECK(s.rows == 3);
  CHECK(s.bad_lines == 1);
  CHECK(s.x == std::vector<double>{1, 2, 3.5});
  CHECK_FALSE(s.x_integer);
  CHECK(s.y["loss"] == std::vector<double>{3, 9, 1});
}

namespace {

trial::Trial decided(const std::string& id, trial::Reason r, trial::Cause c, double at) {
  trial::Trial t;
  t.id = id;
  t.name = "trial_" + id;
  t.status = r == trial::Reason::kPaused ? trial::Status::kPaused : trial::Status::kTerminated;
  t.reason = r;
  t.cause = c;
  t.decided_at = at;
  t.iteration = static_cast<int64_t>(at) + 1;  // its last row (time_attr is not the iteration)
  return t;
}

}  // namespace

TEST_CASE("the scheduler's decisions: from the state and from pbt_policy.jsonl", "[report]") {
  testing::ScratchDir d;
  state::ExperimentState s;
  s.scheduler = {{"type", "asha"}};
  s.trials = {decided("00000", trial::Reason::kStopped, trial::Cause::kCutoff, 3),
              decided("00001", trial::Reason::kStopped, trial::Cause::kMaxT, 9),
              decided("00002", trial::Reason::kPaused, trial::Cause::kRung, 4),
              decided("00003", trial::Reason::kNone, trial::Cause::kNone, 0)};
  s.trials[3].exploited_from = "00000";  // carried out: the policy file has it
  s.trials[3].exploited_at = 2;
  std::string policy =
      json{{"trial", "00003"}, {"donor", "00000"}, {"at", 2}, {"donor_iteration", 1}}.dump() +
      "\n" + "{not json\n" + json{{"trial", "00009"}, {"donor", "00000"}, {"at", 1}}.dump() + "\n" +
      json{{"trial", "00003"}, {"donor", "00001"}, {"at", 6}}.dump() + "\n";
  s.pbt_policy_bytes = policy.size();
  // A line past the length the state knows (a crash after the append): not read.
  policy += json{{"trial", "00003"}, {"donor", "00002"}, {"at", 8}}.dump() + "\n";
  { std::ofstream(d.path / "pbt_policy.jsonl") << policy; }
  auto marks = report::read_decisions(s, d.path);
  REQUIRE(marks["00000"].size() == 1);
  CHECK(marks["00000"][0].kind == report::MarkKind::kStopped);
  CHECK(marks["00000"][0].x == 4);  // on its last row
  CHECK(marks["00000"][0].text == "stopped by asha at 3");
  CHECK(marks["00001"][0].kind == report::MarkKind::kMaxT);
  CHECK(marks["00002"][0].kind == report::MarkKind::kPaused);
  CHECK(marks["00002"][0].text == "paused by asha at 4");
  REQUIRE(marks["00003"].size() == 2);  // the two exploits within the known length
  CHECK(marks["00003"][0].kind == report::MarkKind::kExploited);
  CHECK(marks["00003"][0].text == "exploited trial_00000 at 2");
  CHECK(marks["00003"][0].x == 1);       // where it goes on from
  CHECK(marks["00003"][1].x == 6);       // no donor_iteration: at
  CHECK_FALSE(marks.contains("00009"));  // no such trial
  CHECK(std::string(report::mark_kind_name(report::MarkKind::kMaxT)) == "max_t");
}

TEST_CASE("a big JSON text parses the same with progress reported along the way", "[util]") {
  std::string text = "{\"rows\": [";
  // Over 1 MiB in few values (the ASan build's parse costs per value): 2,000 rows of ~600 bytes.
  for (int i = 0; i < 2000; ++i)
    text += (i ? ",\n" : "") + json{{"i", i}, {"name", std::string(600, 'r')}}.dump();
  text += "], \"bad\": NaN}";
  REQUIRE(text.size() > (1u << 20));
  std::vector<size_t> seen;
  json j = util::parse_json_ext(text, util::kMaxJsonDepth, [&](size_t done, size_t total) {
    CHECK(total >= text.size());
    CHECK(done <= total);
    seen.push_back(done);
  });
  REQUIRE_FALSE(j.is_discarded());
  CHECK(util::dump_json_ext(j) == util::dump_json_ext(util::parse_json_ext(text)));
  REQUIRE(seen.size() >= 1);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
}

TEST_CASE("loading a big state reports bytes parsed, then trials checked", "[state]") {
  testing::ScratchDir d;
  state::ExperimentState s;
  s.name = "big";
  for (int i = 0; i < 4000; ++i) {
    trial::Trial t;
    t.id = std::to_string(100000 + i);
    t.name = "trial_" + t.id;
    t.index = static_cast<uint64_t>(i);
    t.config = {{"lr", 0.001 * i}, {"note", std::string(300, 'n')}};
    s.trials.push_back(t);
  }
  REQUIRE(state::save(d.path, s, false));
  std::map<state::LoadStage, std::vector<std::pair<size_t, size_t>>> calls;
  auto back = state::load(d.path, [&](state::LoadStage st, size_t done, size_t total) {
    calls[st].emplace_back(done, total);
  });
  REQUIRE(back.has_value());
  CHECK(back->trials.size() == 4000);
  REQUIRE(calls[state::LoadStage::kParse].size() >= 1);  // the file is over 1 MiB
  CHECK(calls[state::LoadStage::kParse].back().second > (1u << 20));
  REQUIRE_FALSE(calls[state::LoadStage::kCheck].empty());
  CHECK(calls[state::LoadStage::kCheck].back() == std::pair<size_t, size_t>{4000, 4000});
  CHECK(std::string(state::load_stage_label(state::LoadStage::kParse)) == "reading state");
}

// A FIFO planted as result.json (or given to read_file) must be refused, not block: opening one
// with no writer blocks forever, which hung `tune report` and `tune export`.
TEST_CASE("a FIFO in place of result.json does not block the report's readers", "[report]") {
  testing::ScratchDir d;
  fs::path fifo = d.path / "result.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto unblock = [&] {  // a writer lets a blocked open() return, so a failing test still ends
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  };
  auto within = [&](auto fn) {
    auto f = std::async(std::launch::async, fn);
    bool done = f.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    while (f.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) unblock();
    return done;
  };
  CHECK(within([&] { return report::read_series(d.path).bad_lines; }));
  CHECK(within([&] { return util::read_file(fifo).has_value(); }));
  auto r = util::read_file(fifo);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("not a regular file") != std::string::npos);
  CHECK_FALSE(util::is_regular_file_at(fifo));
}
