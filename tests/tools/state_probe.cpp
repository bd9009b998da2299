// tune_state_probe: reads experiment dirs (one per line on stdin) and loads each with
// state::load, the loader `tune run --resume` and `tune status` use. Prints one JSON line per
// dir: {"dir": D, "ok": true, "trials": [ids...]} or {"dir": D, "ok": false, "error": MSG}.
// Used by the state-recovery property test (tests/integration/test_state_recovery.py), which
// damages a real run's files thousands of times: one process for all of them keeps it fast.
#include <spdlog/spdlog.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "state/state.hpp"

int main() {
  spdlog::set_level(spdlog::level::off);
  std::string dir;
  while (std::getline(std::cin, dir)) {
    nlohmann::json out = {{"dir", dir}};
    auto s = tune::state::load(dir);
    out["ok"] = s.has_value();
    if (s) {
      out["trials"] = nlohmann::json::array();
      for (const auto& t : s->trials) out["trials"].push_back(t.id);
    } else {
      out["error"] = s.error().message;
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n"
              << std::flush;
  }
  return 0;
}
