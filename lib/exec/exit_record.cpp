// Attempt nonces and the check of a supervisor's exit record (see exit_record.hpp).
#include "exec/exit_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent/nonce.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

constexpr size_t kKeyBytes = 16;

}  // namespace

Result<std::string> load_record_key(const fs::path& file) {
  if (auto text = util::read_file(file, 4096)) {
    std::string key = text->substr(0, text->find('\n'));
    if (agent::valid_nonce_key(key)) return key;
  }
  auto drawn = util::random_hex(kKeyBytes);
  if (!drawn) return fail("cannot draw a random key: ", drawn.error().message);
  std::string key = std::move(*drawn);
  if (auto w = util::write_file_atomic(file, key + "\n", true); !w)
    return std::unexpected(w.error());
  ::chmod(file.c_str(), 0600);
  return key;
}

std::string attempt_nonce(std::string_view key, std::string_view trial_name, int attempt) {
  return agent::keyed_nonce(key, trial_name, attempt);
}

std::string record_path(std::string_view trial_name) {
  return ".tune/exit/" + std::string(trial_name) + ".json";
}

RecordCheck check_exit_record(const std::optional<std::string>& text, int attempt,
                              const AttemptIdentity& id, ExitInfo& info) {
  if (!text) return RecordCheck::kAbsent;
  auto parsed = parse_exit_record(*text, attempt);
  if (!parsed) {
    // An earlier attempt's record (this one has not written its own yet, or never started):
    // none for this attempt, rather than a forged one.
    auto j = util::parse_json_ext(*text);
    auto a = j.is_object() ? j.find("attempt") : j.end();
    if (a != j.end() && a->is_number_integer() && a->get<int64_t>() >= 1 &&
        a->get<int64_t>() < attempt)
      return RecordCheck::kAbsent;
    return RecordCheck::kForged;
  }
  if (id.nonce.empty() || parsed->nonce != id.nonce) return RecordCheck::kForged;
  auto differs = [](const auto& known, const auto& recorded) { return known && recorded != known; };
  if (differs(id.supervisor, parsed->supervisor) || differs(id.pid, parsed->pid) ||
      differs(id.started, parsed->started))
    return RecordCheck::kForged;
  info = std::move(*parsed);
  return RecordCheck::kGenuine;
}

}  // namespace tune::exec
