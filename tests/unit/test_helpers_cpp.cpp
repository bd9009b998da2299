// The header-only C++ trial helper: its JSON reader, report lines and the step-mode server.
#include <tune/trial.hpp>

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

using json = nlohmann::json;

namespace {
struct CaptureOut {
  std::ostringstream buf;
  CaptureOut() { tune_trial::detail::out() = &buf; }
  ~CaptureOut() { tune_trial::detail::out() = &std::cout; }
  std::vector<json> lines() const {
    std::vector<json> out;
    std::istringstream in(buf.str());
    for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
    return out;
  }
};
}  // namespace

TEST_CASE("the C++ helper parses configs", "[helpers]") {
  auto v = tune_trial::Value::parse(
      R"({"lr": 0.001, "name": "a\"b\u00e9", "opt": {"m": [1, 2]}, "ok": true, "n": null})");
  CHECK(v["lr"].number() == 0.001);
  CHECK(v["name"].string() == "a\"b\xc3\xa9");
  CHECK(v["opt"]["m"].items().size() == 2);
  CHECK(v["ok"].boolean());
  CHECK(v["n"].is_null());
  CHECK(v["missing"].number(7) == 7);
  CHECK_THROWS(tune_trial::Value::parse("{\"a\": }"));
  CHECK_THROWS(tune_trial::Value::parse("{\"a\": 1} x"));
}

TEST_CASE("the C++ helper reports valid JSON lines, NaN as null", "[helpers]") {
  CaptureOut cap;
  tune_trial::report({{"loss", 0.25}, {"epoch", 3}, {"bad", std::nan("")}, {"tag", "x\"y\n"}},
                     "/tmp/ck");
  auto l = cap.lines();
  REQUIRE(l.size() == 1);
  CHECK(l[0]["loss"] == 0.25);
  CHECK(l[0]["epoch"] == 3);
  CHECK(l[0]["bad"].is_null());
  CHECK(l[0]["tag"] == "x\"y\n");
  CHECK(l[0]["checkpoint"] == "/tmp/ck");
}

TEST_CASE("the C++ Trainable serves step, save, restore, reset and stop", "[helpers]") {
  struct Counter : tune_trial::Trainable {
    int n = 0;
    std::string saved, loaded;
    std::vector<tune_trial::Metric> step() override { return {{"n", ++n}}; }
    void save_checkpoint(const std::string& d) override { saved = d; }
    void load_checkpoint(const std::string& d) override { loaded = d; }
    bool reset_config(const tune_trial::Value& c) override { return c["lr"].number() > 0; }
  } t;
  CaptureOut cap;
  std::istringstream in(
      "{\"op\":\"step\"}\n\n "
      "garbage\n{\"op\":\"step\"}\n{\"op\":\"save\",\"path\":\"/tmp/tune-helper-test-save\"}\n"
      "{\"op\":\"restore\",\"path\":\"/"
      "r\"}\n{\"op\":\"reset\",\"config\":{\"lr\":1}}\n{\"op\":\"stop\"}\n{\"op\":\"step\"}\n");
  CHECK(tune_trial::run_trainable(t, in) == 0);
  auto l = cap.lines();
  REQUIRE(l.size() == 5);
  CHECK(l[0]["n"] == 1);
  CHECK(l[1]["n"] == 2);
  CHECK(l[2]["saved"] == "/tmp/tune-helper-test-save");
  CHECK(l[3]["restored"] == "/r");
  CHECK(l[4]["reset"] == true);
  CHECK(t.n == 2);  // nothing after stop
  CHECK(t.loaded == "/r");
  ::rmdir("/tmp/tune-helper-test-save");
}
