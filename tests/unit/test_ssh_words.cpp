// The ssh command rsync runs for a host (`rsync -e`): every word reaches ssh intact, whatever
// quotes or spaces the paths hold. Checked against the real rsync, with a stand-in `ssh` on
// PATH that records its arguments.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "exec/ssh_host.hpp"
#include "fake_executor.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

using namespace tune;
using testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// The argv rsync gave to `ssh` for `-e words`.
std::vector<std::string> argv_rsync_gives_ssh(const ScratchDir& d, const std::string& words) {
  fs::path bin = d.path / "bin";
  fs::create_directories(bin);
  fs::path args = d.path / "args";
  {
    std::ofstream f(bin / "ssh");
    f << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > '" << args.string()
      << "'\nexit 1\n";
  }
  fs::permissions(bin / "ssh", fs::perms::owner_all);
  std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (bin.string() + ":" + old_path).c_str(), 1);
  auto rc = util::run_process({"rsync", "-e", words, "somehost:/x", (d.path / "dst").string()},
                              d.path / "rsync.log", 30);
  ::setenv("PATH", old_path.c_str(), 1);
  REQUIRE(rc);
  auto text = util::read_file(args, 1 << 20);
  REQUIRE(text);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nul; (nul = text->find('\0', start)) != std::string::npos; start = nul + 1)
    out.push_back(text->substr(start, nul - start));
  return out;
}

}  // namespace

TEST_CASE("rsync hands ssh every option word intact, quotes and spaces included", "[ssh][rsync]") {
  ScratchDir d;
  exec::SshHost h;
  h.cfg.port = 2222;
  h.cfg.user = "it's \"me\"";
  h.cfg.identity_file = (d.path / "a dir/with 'both' \"quotes\"/id").string();
  h.cfg.known_hosts = (d.path / "known hosts").string();
  h.control_path = (d.path / "cm it's").string();
  auto got = argv_rsync_gives_ssh(d, h.ssh_words());
  std::vector<std::string> want = {"-o", "ControlMaster=no", "-o", "ControlPath=" + h.control_path};
  for (const auto& w : h.ssh_options()) want.push_back(w);
  REQUIRE(got.size() >= want.size());
  got.resize(want.size());  // then rsync's own: the host and the remote command
  CHECK(got == want);
}
