// The file operations run on worker hosts (lib/agent/file_ops.hpp), here on this machine.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "agent/file_ops.hpp"

namespace fs = std::filesystem;

TEST_CASE("two deletions of the same tree at once both succeed", "[file_ops]") {
  // (the host's agent's child and the driver's retry in the host's shell can overlap)
  char tmpl[] = "/tmp/tune-file-ops-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  fs::path dir = tmpl;
  for (int round = 0; round < 5; ++round) {
    for (int d = 0; d < 20; ++d) {
      fs::create_directories(dir / "tree" / std::to_string(d));
      for (int f = 0; f < 100; ++f)
        std::ofstream(dir / "tree" / std::to_string(d) / std::to_string(f)) << f;
    }
    std::string a, b;
    std::thread one([&] { a = tune::agent::remove_entry(dir.string(), "tree"); });
    std::thread two([&] { b = tune::agent::remove_entry(dir.string(), "tree"); });
    one.join();
    two.join();
    CHECK(a == "");
    CHECK(b == "");
    CHECK_FALSE(fs::exists(dir / "tree"));
  }
  CHECK(tune::agent::remove_entry(dir.string(), "../x").find("refused name") == 0);
  fs::remove_all(dir);
}
