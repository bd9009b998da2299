#include "control/stop_requests.hpp"

#include <algorithm>

#include "util/atomic_file.hpp"

namespace tune::control {

namespace {

fs::path request_dir(const fs::path& exp_dir) {
  return exp_dir / ".tune" / "stop_requests";
}

// Trial ids are digits ("00003"); anything else in the dir is not a request.
bool is_trial_id(const std::string& s) {
  return !s.empty() && s.size() <= 20 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<void> write_stop_request(const fs::path& exp_dir, const std::string& trial_id) {
  if (!is_trial_id(trial_id)) return fail("'", trial_id, "' is not a trial id");
  std::error_code ec;
  fs::create_directories(request_dir(exp_dir), ec);
  if (ec) return fail("cannot create '", request_dir(exp_dir).string(), "': ", ec.message());
  return util::write_file_atomic(request_dir(exp_dir) / trial_id, "stop\n", true);
}

std::vector<std::string> stop_requests(const fs::path& exp_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(request_dir(exp_dir), ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (is_trial_id(name) && it->is_regular_file(ec)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool stop_requested(const fs::path& exp_dir, const std::string& trial_id) {
  std::error_code ec;
  return is_trial_id(trial_id) && fs::exists(request_dir(exp_dir) / trial_id, ec);
}

void remove_stop_request(const fs::path& exp_dir, const std::string& trial_id) {
  if (!is_trial_id(trial_id)) return;
  std::error_code ec;
  fs::remove(request_dir(exp_dir) / trial_id, ec);
}

}  // namespace tune::control
