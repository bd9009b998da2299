// The header-only C++ trial helper: its JSON reader, report lines and the step-mode server.
#include <tune/trial.hpp>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
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

TEST_CASE("the C++ helper reports JSON lines, NaN and infinities as Python writes them",
          "[helpers]") {
  CaptureOut cap;
  tune_trial::report({{"loss", 0.25},
                      {"epoch", 3},
                      {"bad", std::nan("")},
                      {"up", HUGE_VAL},
                      {"down", -HUGE_VAL},
                      {"tag", "x\"y\n"}},
                     "/tmp/ck");
  std::string text = cap.buf.str();
  CHECK(text.find("\"bad\":NaN,") != std::string::npos);
  CHECK(text.find("\"up\":Infinity,") != std::string::npos);
  CHECK(text.find("\"down\":-Infinity,") != std::string::npos);
  // The rest is plain JSON (nlohmann reads no NaN: each is swapped for a number here).
  for (const char* tok : {"-Infinity", "Infinity", "NaN"})
    for (size_t at; (at = text.find(tok)) != std::string::npos;)
      text.replace(at, std::strlen(tok), "0");
  auto l = json::parse(text);
  CHECK(l["loss"] == 0.25);
  CHECK(l["epoch"] == 3);
  CHECK(l["tag"] == "x\"y\n");
  CHECK(l["checkpoint"] == "/tmp/ck");
}

TEST_CASE("the C++ helper makes checkpoint dirs in the staging dir, never in the cwd",
          "[helpers]") {
  namespace fs = std::filesystem;
  struct Env {  // restores the variables it changes
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    void set(const char* k, const char* v) {
      const char* old = std::getenv(k);
      saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      v ? ::setenv(k, v, 1) : ::unsetenv(k);
    }
    ~Env() {
      for (auto it = saved.rbegin(); it != saved.rend(); ++it)
        it->second ? ::setenv(it->first.c_str(), it->second->c_str(), 1)
                   : ::unsetenv(it->first.c_str());
    }
  } env;
  fs::path tmp = fs::temp_directory_path() / ("tune-cpp-helper-" + std::to_string(::getpid()));
  fs::create_directories(tmp / "trial");
  env.set("TMPDIR", tmp.c_str());
  env.set("TUNE_CHECKPOINT_STAGING", nullptr);
  SECTION("in a trial: a staged name in the trial dir") {
    env.set("TUNE_TRIAL_DIR", (tmp / "trial").c_str());
    fs::path d = tune_trial::make_checkpoint_dir();
    CHECK(d.parent_path() == tmp / "trial");
    CHECK(d.filename().string().starts_with(".staged_checkpoint_"));
    CHECK(fs::is_directory(d));
  }
  SECTION("outside tune: under the temp dir") {
    env.set("TUNE_TRIAL_DIR", nullptr);
    auto before = std::distance(fs::directory_iterator(fs::current_path()), {});
    fs::path d = tune_trial::make_checkpoint_dir();
    CHECK(d.parent_path() == tmp);
    CHECK(fs::is_directory(d));
    CHECK(std::distance(fs::directory_iterator(fs::current_path()), {}) == before);
  }
  fs::remove_all(tmp);
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
