// The report page: one self-contained HTML file (uPlot, the report's script and style, and the
// data, all inline; a Content-Security-Policy that forbids every network request).
#pragma once

#include <functional>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace tune::report {

// JSON text that is safe inside an HTML <script> element: `<`, `>`, `&`, U+2028 and U+2029 are
// written as \uXXXX escapes (they can only occur inside strings), invalid UTF-8 as U+FFFD.
[[nodiscard]] std::string script_safe_json(const nlohmann::json& j);

// Text safe in HTML element content and attribute values (&, <, >, ", ' escaped).
[[nodiscard]] std::string html_escape(std::string_view s);

// The whole page for `meta` and the curves' binary columns `series` (as report::gather makes
// them): the metadata as JSON, the columns as base64, each in its own non-script element.
[[nodiscard]] std::string render_html(const nlohmann::json& meta, std::string_view series = {});

// Gathers `exp_dir` and writes its page to `out` atomically (temp file, rename): a reader never
// sees half a report. Returns the bytes written. `progress(done, total)`: trials read so far.
[[nodiscard]] Result<size_t> write_report(const std::filesystem::path& exp_dir,
                                          const std::filesystem::path& out,
                                          const std::function<void(size_t, size_t)>& progress = {});

}  // namespace tune::report
