// When output arrived (stdout.times): the reader of the supervisor's notes, and the results'
// times the controller derives from them.
#include <catch2/catch.hpp>

#include "controller_fixtures.hpp"
#include "exec/arrivals.hpp"

using namespace tune;
using namespace tune::testing;

namespace {

struct Read {
  std::vector<exec::Arrival> arrivals;
  std::optional<exec::HostTime> started;
};

Read read_all(int attempt, const std::vector<std::string>& chunks) {
  exec::ArrivalReader r(attempt);
  Read out;
  for (const auto& c : chunks) r.feed(c, out.arrivals, out.started);
  return out;
}

}  // namespace

TEST_CASE("arrival notes: only the attempt's own, across any split of the bytes", "[arrivals]") {
  std::string file =
      "start 1 1000000000000 5000000000\n"
      "10 1001000000000 6000000000\n"
      "start 2 1100000000000 9000000000\n"
      "7 1100500000000 9500000000\n"
      "30 1102000000000 11000000000\n";
  for (size_t cut = 0; cut <= file.size(); cut += 7) {
    auto got = read_all(2, {file.substr(0, cut), file.substr(cut)});
    REQUIRE(got.started);
    CHECK(got.started->mono == Approx(9.0));
    CHECK(got.started->wall == Approx(1100.0));
    REQUIRE(got.arrivals.size() == 2);
    CHECK(got.arrivals[0].end == 7);
    CHECK(got.arrivals[1].end == 30);
    CHECK(got.arrivals[1].at.mono == Approx(11.0));
  }
  auto first = read_all(1, {file});
  REQUIRE(first.arrivals.size() == 1);  // attempt 2's notes are not attempt 1's
  CHECK(first.arrivals[0].end == 10);
  CHECK(read_all(3, {file}).arrivals.empty());
  CHECK_FALSE(read_all(3, {file}).started);
}

TEST_CASE("arrival notes: what is not a well-formed note is skipped", "[arrivals]") {
  std::string junk(5000, 'x');
  auto got = read_all(1, {"start 1 1000000000000 5000000000\n",
                          "12 1 2 3\n",                             // a word too many
                          "-5 1000000000000 6000000000\n",          // negative
                          "0 1000000000000 6000000000\n",           // zero
                          "99999999999999999999999 1 1\n",          // out of range
                          "20 1000000000000\n",                     // a word short
                          "2O 1000000000000 6000000000\n",          // not a number
                          junk + " 40 1000000000000 6000000000\n",  // overlong
                          "50 1002000000000 7000000000\n",
                          "45 1003000000000 8000000000\n",  // goes back: not the supervisor's
                          "60 1004000000000 9000000000"});  // no newline yet
  REQUIRE(got.arrivals.size() == 1);
  CHECK(got.arrivals[0].end == 50);
  CHECK(got.arrivals[0].at.mono == Approx(7.0));
}

TEST_CASE("results get the trial host's arrival times when its supervisor notes them",
          "[arrivals][controller]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
param_space: {x: 1}
trial: {command: ["train"]}
)");
  // Three results printed in one burst (as read late, after an outage): their notes say they
  // arrived 1 s, 3.5 s and 4 s after the start, the last one split across two reads.
  struct Late : FakeProcess {
    int ticks = 0;
    void on_tick(FakeContext& c, double) override {
      if (++ticks == 1) {
        std::string a = "{\"v\":1}\n", b = "{\"v\":2}\n", part = "{\"v\"";
        uint64_t base = 0;
        c.print_noted(
            a + b + part,
            {{base + a.size(), {1001.0, 101.0}}, {base + a.size() + b.size(), {1003.5, 103.5}}},
            exec::HostTime{1000.0, 100.0});
      } else if (ticks == 2) {
        c.print_noted(":3}\n", {{8 + 8 + 8, {1004.0, 104.0}}});
      } else {
        c.exit(0);
      }
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Late>(); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  auto rows = results_of(e, c.state().trials.at(0));
  REQUIRE(rows.size() == 3);
  std::vector<double> this_iter, total;
  std::vector<int64_t> stamps;
  for (const auto& r : rows) {
    this_iter.push_back(r["time_this_iter_s"].get<double>());
    total.push_back(r["time_total_s"].get<double>());
    stamps.push_back(r["timestamp"].get<int64_t>());
  }
  CHECK(this_iter[0] == Approx(1.0));
  CHECK(this_iter[1] == Approx(2.5));
  CHECK(this_iter[2] == Approx(0.5));
  CHECK(total[2] == Approx(4.0));
  CHECK(stamps == std::vector<int64_t>{1001, 1003, 1004});
  CHECK(c.state().trials.at(0).time_total_s == Approx(4.0));
}
