#include "report/html.hpp"

#include "report/assets.inc"
#include "report/gather.hpp"
#include "util/atomic_file.hpp"
#include "util/base64.hpp"

namespace tune::report {

using json = nlohmann::json;

std::string script_safe_json(const json& j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 64);
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
               (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// No request of any kind may leave the page: only inline scripts, styles and data: images.
constexpr std::string_view kCsp =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'";

constexpr std::string_view kBody = R"(<header><h1 id="title"></h1><div id="sub"></div></header>
<section id="summary"></section>
<section class="card"><h2>Learning curves</h2>
<div class="controls"><label>metric <select id="metric"></select></label>
<label><input type="checkbox" id="logscale"> log scale</label>
<span id="hover" class="muted"></span></div>
<div id="curves"></div>
<div class="muted legend" id="legend">best trial in orange;
<span class="mk-ckpt" data-mark="ckpt">o</span> checkpoint;
the scheduler's decisions: <span class="mk-stop" data-mark="stopped">&#9660;</span> stopped
<span class="mk-maxt" data-mark="max_t">&#9654;</span> reached max_t
<span class="mk-paused" data-mark="paused">&#9646;&#9646;</span> paused
<span class="mk-exploit" data-mark="exploited">&#9670;</span> exploited another trial's checkpoint
(pbt); end of a trial: <span class="mk-term" data-mark="TERMINATED">&#9632;</span> TERMINATED
<span class="mk-err" data-mark="ERROR">&#10005;</span> ERROR. Hover a curve for the details.
<span id="marks-note"></span></div>
<div id="downsampled" class="muted"></div></section>
<section class="card"><h2>Hyperparameters against the final metric</h2>
<canvas id="parcoords" height="320"></canvas></section>
<section class="card"><h2>Trials</h2>
<div class="controls"><label>filter <input type="search" id="filter" placeholder="text in any column"></label>
<span id="shown" class="muted"></span></div>
<div class="tablewrap"><table id="trials"><thead></thead><tbody></tbody></table></div></section>
)";

}  // namespace

std::string render_html(const json& data, std::string_view series) {
  std::string title = "tune report: " + data.value("name", std::string());
  std::string out;
  out.reserve(kUplotJs.size() + kReportJs.size() + series.size() / 3 * 4 + 8192);
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  out += "<meta http-equiv=\"Content-Security-Policy\" content=\"";
  out += kCsp;
  out += "\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>";
  out += html_escape(title);
  out += "</title>\n<style>";
  out += kUplotCss;
  out += "</style>\n<style>";
  out += kReportCss;
  out += "</style>\n</head><body>\n";
  out += kBody;
  out += "<script type=\"application/json\" id=\"tune-data\">";
  out += script_safe_json(data);
  // Base64's alphabet (A-Z a-z 0-9 + / =) cannot end the element.
  out += "</script>\n<script type=\"application/octet-stream\" id=\"tune-series\">";
  util::base64_encode(series, out);
  out += "</script>\n<script>";
  out += kUplotJs;
  out += "</script>\n<script>";
  out += kReportJs;
  out += "</script>\n</body></html>\n";
  return out;
}

Result<size_t> write_report(const std::filesystem::path& exp_dir, const std::filesystem::path& out,
                            const std::function<void(size_t, size_t)>& progress) {
  auto data = gather(exp_dir, progress);
  if (!data) return std::unexpected(data.error());
  std::string page = render_html(data->meta, data->series);
  if (auto r = util::write_file_atomic(out, page, false); !r) return std::unexpected(r.error());
  return page.size();
}

}  // namespace tune::report
