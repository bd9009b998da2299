// The host's shell's way to write step-mode lines (ssh_stdin.hpp).
#include "exec/ssh_stdin.hpp"

#include "agent/stdin_record.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

std::string q(const std::string& s) {
  return util::shell_quote(s);
}

}  // namespace

std::string stdin_shell_command(const std::string& dir, const std::string& run, uint64_t issued,
                                const std::vector<std::pair<uint64_t, std::string>>& lines) {
  // As the agent does it: the record a plain file with one link, never a link followed, read
  // and updated under its lock (held for that only), and then the lines it did not name
  // written; the FIFO looked for up to 10 s right after the start, its open never waiting for
  // long (a FIFO an ended attempt left, which nobody reads, is looked up again). The record is
  // written through the descriptor that was checked to be it (fd 9, opened once: its offset
  // stays 0, as it is only read by its path), so a link swapped in after the check is never
  // written through.
  std::string fifo = q(dir + "/stdin.fifo");
  std::string rec = q(dir + "/" + agent::kStdinRecordName);
  uint64_t last = lines.empty() ? 0 : lines.back().first;
  std::string cmd =
      "( r=" + rec + "; f=" + fifo +
      "; if [ -L \"$r\" ] || { [ -e \"$r\" ] && [ ! -f \"$r\" ]; }; then exit 4; fi; "
      "put() { if command -v timeout >/dev/null; then timeout 2 sh -c 'printf \"%s\\n\" \"$0\" "
      "> \"$1\"' \"$1\" \"$f\"; else printf '%s\\n' \"$1\" > \"$f\"; fi; }; "
      "{ { [ -L \"$r\" ] || [ ! -f /dev/fd/9 ]; } && exit 4; "
      "[ \"$(stat -L -c %d:%i:%h /dev/fd/9 2>/dev/null)\" = \"$(stat -c %d:%i:%h \"$r\" "
      "2>/dev/null)\" ] || exit 4; "
      "case \"$(stat -L -c %h /dev/fd/9 2>/dev/null || echo 1)\" in 1) ;; *) exit 4;; esac; "
      "if command -v flock >/dev/null; then flock -w 5 9 || exit 5; fi; "
      "s=; n=; read s n < \"$r\"; [ \"$s\" = " +
      run +
      " ] || n=0; case \"$n\" in ''|*[!0-9]*) n=0;; esac; [ ${#n} -gt 18 ] && exit 6; "
      "[ \"$n\" -gt " +
      std::to_string(issued) + " ] && exit 6; if [ \"$n\" -lt " + std::to_string(last) +
      " ]; then printf '%-" + std::to_string(agent::kStdinRecordSize - 1) + "s\\n' '" + run + " " +
      std::to_string(last) +
      "' >&9; fi; true; } 9<> \"$r\" || exit 4; "
      "i=0; until [ -p \"$f\" ]; do i=$((i+1)); [ $i -gt 200 ] && exit 3; sleep 0.05; done; ";
  for (const auto& [n, text] : lines)
    cmd += "if [ \"$n\" -lt " + std::to_string(n) + " ]; then i=0; until put " + q(text) +
           "; do i=$((i+1)); [ $i -ge 5 ] && exit 3; [ -p \"$f\" ] || exit 3; done; fi; ";
  return cmd + "exit 0 ) 2>/dev/null";
}

}  // namespace tune::exec
