// Checks of YAML text that run before yaml-cpp builds a node tree from it.
//
// yaml-cpp builds an alias as a shared node: a self-referential alias (`a: &x [*x]`) makes a
// cycle that every walk of the tree follows forever, and nested aliases ("billion laughs") make
// a small file expand to gigabytes once converted. Its strings may also hold bytes that are not
// UTF-8, or NUL (from a "\0" escape), which later cut argv words and paths or stop JSON output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace tune::spec {

// How large a document may become once every alias is expanded.
struct YamlLimits {
  uint64_t max_nodes = 1'000'000;
  uint64_t max_bytes = 64u << 20;  // of scalar text, keys included
  uint64_t max_depth = 1000;       // nesting, through aliases
};

// Reads the first document of `text` event by event (no tree is built) and fails on a recursive
// alias, an expanded document over `limits`, or a scalar (key or value, after escapes) that is
// not valid UTF-8 or holds a NUL byte. Messages start with `label:LINE:COL: ` (or `label: ` when
// `located` is false, for a --set value). YAML syntax errors are left for the real parse to
// report (it stops at the same place). Never throws.
[[nodiscard]] Result<void> check_yaml(std::string_view text, const std::string& label, bool located,
                                      const YamlLimits& limits = {});

}  // namespace tune::spec
