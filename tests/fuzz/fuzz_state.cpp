// Fuzz target: the state reader. Input: experiment_state.json, then optionally a line
// "#--journal" and the journal's bytes. Both are written to a scratch experiment dir and read
// back with state::load (what `tune run --resume` and `tune status` use), and the state file's
// JSON (if it parses) goes through state::from_json as well. Errors are Results; a throw, a
// crash, UB, or a loaded state that cannot be written again is a finding.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.hpp"
#include "state/state.hpp"

namespace fs = std::filesystem;

namespace {

// One scratch experiment dir for the whole run (inputs are written over it).
const fs::path& scratch() {
  static const fs::path dir = [] {
    char tmpl[] = "/tmp/tune-fuzz-state-XXXXXX";
    fs::path d = ::mkdtemp(tmpl);
    fs::create_directories(d / ".tune");
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch(), ec);
    });
    return d;
  }();
  return dir;
}

void write(const fs::path& p, std::string_view bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tune;
  auto [state_text, journal] = fuzz::split_at(fuzz::as_text(data, size), "\n#--journal\n");
  const fs::path& dir = scratch();
  write(dir / state::kStateFile, state_text);
  write(dir / ".tune" / "state.journal", journal);
  try {
    auto s = state::load(dir);
    if (s) {
      if (s->trials.empty() && s->name.empty() && state_text.empty())
        fuzz::finding("an empty file loaded");
      (void)state::to_json(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else if (s.error().message.find(state::kStateFile) == std::string::npos &&
               s.error().message.find("state.journal") == std::string::npos) {
      fuzz::finding("an error that names no file: " + s.error().message);
    }
    auto j = nlohmann::json::parse(state_text, nullptr, false);
    if (!j.is_discarded()) (void)state::from_json(j, "fuzz");
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("the state reader threw: ") + ex.what());
  }
  return 0;
}
