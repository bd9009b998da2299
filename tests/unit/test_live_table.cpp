// The live table and the other trial tables: width fitting with a middle ellipsis (UTF-8
// aware, escape sequences never reach the terminal), column choice (progress_reporter,
// --columns), the summary line with ETA, plain lines off a terminal, and the controller's
// observer seam. Widths are given to the renderer, never read from the test's terminal.
#include <catch2/catch.hpp>

#include "control/controller.hpp"
#include "controller_fixtures.hpp"
#include "fake_executor.hpp"
#include "ui/layout.hpp"
#include "ui/live_table.hpp"
#include "ui/progress_bar.hpp"
#include "ui/terminal.hpp"
#include "ui/text.hpp"

using namespace tune;
using testing::FakeExecutor;
using testing::make_exp;
using testing::opts;
using testing::Reporter;
using testing::ScratchDir;

namespace {

const std::string kEllipsis = "\xE2\x80\xA6";

// Lines of `text` without their SGR color sequences.
std::vector<std::string> plain_lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      size_t m = text.find('m', i);
      REQUIRE(m != std::string::npos);
      for (size_t k = i + 2; k < m; ++k) REQUIRE((std::isdigit(text[k]) || text[k] == ';'));
      i = m;
      continue;
    }
    if (text[i] == '\n') {
      out.push_back(line);
      line.clear();
    } else {
      line += text[i];
    }
  }
  CHECK(line.empty());  // every line ends in '\n'
  return out;
}

spec::Experiment experiment(const ScratchDir& d, const std::string& extra = "") {
  return make_exp(d, R"(
name: fit
trial: {command: [train]}
param_space:
  lr: {grid_search: [0.1, 0.01]}
  optimizer: {name: {grid_search: [adam, sgd]}}
num_samples: 2
metric: loss
mode: min
stop: {training_iteration: 10}
)" + extra);
}

// Eight trials with names long and short, in several scripts, and a bit of hostile input.
state::ExperimentState fixture(const spec::Experiment& e) {
  state::ExperimentState s;
  s.name = e.name;
  s.total_trials = 8;
  s.next_index = 6;
  s.elapsed_s = 100;
  const char* hosts[] = {"local", "gpu-node-17.cluster.example.org", "local", "h\x1b]0;pwn\x07"};
  for (int i = 0; i < 6; ++i) {
    trial::Trial t;
    t.index = static_cast<uint64_t>(i);
    t.id = "0000" + std::to_string(i);
    t.name = "trial_0000" + std::to_string(i) + "_lr=0.1,optimizer.name=adam";
    t.status = i < 2    ? trial::Status::kRunning
               : i < 4  ? trial::Status::kTerminated
               : i == 4 ? trial::Status::kError
                        : trial::Status::kPending;
    t.host = hosts[i % 4];
    t.iteration = i < 2 ? 3 + i : i < 5 ? 10 : 0;
    t.time_total_s = 12.5 * i;
    t.config = {{"lr", i % 2 ? 0.01 : 0.1}, {"optimizer", {{"name", i % 2 ? "sgd" : "adam"}}}};
    if (i < 5) t.metrics["loss"] = {1.0 / (i + 1), 0.5 / (i + 1), 2.0};
    s.trials.push_back(std::move(t));
  }
  s.trials[1].name = "trial_00001_" + std::string(150, 'x') + "_END";
  s.trials[2].name = "trial_00002_\xE5\xAD\xA6\xE7\xBF\x92\xE7\x8E\x87=\xE9\xAB\x98_" +
                     std::string(60, 'y') + "_\xE2\x9C\x93tail";
  s.trials[3].name = "trial_00003_\x1b[31mred\x1b[0m_\xff\xfe_bad";
  return s;
}

}  // namespace

TEST_CASE("sanitize: control characters and escapes never pass; bad UTF-8 replaced", "[ui]") {
  CHECK(ui::sanitize("a\x1b[31mb") == "a?[31mb");
  CHECK(ui::sanitize("x\x07y\x7f\xc2\x9bz") == "x?y??z");  // BEL, DEL, C1 CSI
  CHECK(ui::sanitize("\xe2\x80\xae"
                     "evil") == "?evil");  // right-to-left override
  CHECK(ui::sanitize("ok\xff") == "ok\xEF\xBF\xBD");
  CHECK(ui::sanitize("\xc0\xaf") == "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  CHECK(ui::sanitize("\xed\xa0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  CHECK(ui::sanitize("caf\xc3\xa9 \xe5\xad\xa6") == "caf\xc3\xa9 \xe5\xad\xa6");
}

TEST_CASE("display width counts cells: wide CJK and zero-width combining marks", "[ui]") {
  CHECK(ui::display_width("abc") == 3);
  CHECK(ui::display_width("\xe5\xad\xa6\xe4\xb9\xa0") == 4);  // two wide
  CHECK(ui::display_width("e\xcc\x81") == 1);                 // e + combining acute
  CHECK(ui::display_width("\xf0\x9f\x9a\x80") == 2);          // rocket emoji
}

TEST_CASE("fit_middle keeps both ends and never cuts a multi-byte sequence", "[ui]") {
  CHECK(ui::fit_middle("short", 10) == "short");
  CHECK(ui::fit_middle("abcdefghijkl", 7) == "abc" + kEllipsis + "jkl");
  CHECK(ui::fit_middle("abcdefghijkl", 1) == kEllipsis);
  CHECK(ui::fit_middle("abcdefghijkl", 0).empty());
  // Every width of a string mixing 1-, 2- and 3-byte characters and wide ones.
  std::string mixed =
      "a\xc3\xa9\xe5\xad\xa6"
      "b\xe2\x9c\x93"
      "c\xf0\x9f\x9a\x80"
      "d\xe5\xad\xa6z";
  size_t full = ui::display_width(mixed);
  for (size_t w = 1; w < full; ++w) {
    std::string f = ui::fit_middle(mixed, w);
    INFO("width " << w << ": " << f);
    CHECK(ui::display_width(f) <= w);
    CHECK(ui::display_width(f) + 1 >= w);  // at most one cell lost to a wide character
    CHECK(ui::sanitize(f) == f);           // well-formed UTF-8: nothing was cut inside
    CHECK(f.find(kEllipsis) != std::string::npos);
  }
  // A combining mark stays with its letter.
  std::string accented =
      "e\xcc\x81"
      "abcdefghi"
      "e\xcc\x81";
  std::string f = ui::fit_middle(accented, 5);
  CHECK(f.starts_with("e\xcc\x81"));
  CHECK(f.ends_with("e\xcc\x81"));
  CHECK(ui::fit_end("abcdefghijkl", 5) == "abcd" + kEllipsis);
  // fit_end keeps only the start: a wide character that does not fit leaves its cell empty
  // (fit_middle gives that cell to the end).
  CHECK(ui::fit_end("ab\xe5\xad\xa6xyz", 4) == "ab" + kEllipsis);
  CHECK(ui::fit_middle("ab\xe5\xad\xa6xyz", 5) == "ab" + kEllipsis + "yz");
  CHECK(ui::fit_end("abc", 0).empty());
  CHECK(ui::fit_end("abc", 3) == "abc");
  for (size_t w = 1; w < full; ++w) {
    std::string e = ui::fit_end(mixed, w);
    INFO("width " << w << ": " << e);
    CHECK(ui::display_width(e) <= w);
    CHECK(ui::display_width(e) + 1 >= w);
    CHECK(e.ends_with(kEllipsis));
    CHECK(mixed.starts_with(e.substr(0, e.size() - kEllipsis.size())));
  }
}

TEST_CASE("layout_table shrinks names in the middle and then drops the least important columns",
          "[ui]") {
  auto cols = [] {
    std::vector<ui::Column> c;
    c.push_back(ui::column("name", 8));
    c.push_back(ui::column("n", 0, 0, true));
    c.push_back(ui::column("extra", 0, 1));
    c[0].cells = {"a-very-long-name-indeed-0001", "short"};
    c[1].cells = {"1", "22"};
    c[2].cells = {"something", "else"};
    return c;
  };
  std::string wide = ui::layout_table(cols(), 200);
  CHECK(wide.find("a-very-long-name-indeed-0001") != std::string::npos);
  CHECK(wide.find("something") != std::string::npos);
  std::string mid = ui::layout_table(cols(), 30);
  for (const auto& l : plain_lines_of(mid)) CHECK(ui::display_width(l) <= 30);
  CHECK(mid.find(kEllipsis) != std::string::npos);
  CHECK(mid.find("-0001") != std::string::npos);   // the end of the name survives
  CHECK(mid.find("a-very") != std::string::npos);  // and its start
  CHECK(mid.find("something") != std::string::npos);
  std::string narrow = ui::layout_table(cols(), 14);
  for (const auto& l : plain_lines_of(narrow)) CHECK(ui::display_width(l) <= 14);
  CHECK(narrow.find("something") == std::string::npos);  // dropped, not squeezed
  CHECK(narrow.find("22") != std::string::npos);
  // Even with nothing left to drop, no line is wider than asked.
  for (const auto& l : plain_lines_of(ui::layout_table(cols(), 5)))
    CHECK(ui::display_width(l) <= 5);
}

TEST_CASE("the live table fits 80 or 120 or 200 columns", "[ui][live_table]") {
  ScratchDir d;
  auto e = experiment(d);
  auto s = fixture(e);
  for (bool color : {false, true}) {
    ui::TableOptions o;
    o.tty = true;
    o.color = color;
    ui::LiveTable table(o);
    std::map<size_t, std::vector<std::string>> by_width;
    for (size_t width : {80, 120, 200}) {
      std::string text = table.render({1.0, s, e}, width, 50);
      INFO("width " << width << "\n" << text);
      auto lines = plain_lines_of(text);  // only SGR escapes, and only with color
      if (!color) CHECK(text.find('\x1b') == std::string::npos);
      for (const auto& l : lines) CHECK(ui::display_width(l) <= width);
      for (const auto& l : lines) CHECK(ui::sanitize(l) == l);  // nothing raw from the trials
      CHECK(text.find("\x1b]") == std::string::npos);           // the host's title-setting escape
      CHECK(text.find('\x07') == std::string::npos);
      CHECK(lines[0].starts_with("== fit == 2 RUNNING, 3 PENDING, 2 TERMINATED, 1 ERROR"));
      size_t title = 0;
      while (title < lines.size() && !lines[title].starts_with("trial ")) ++title;
      CHECK(title >= 1);
      CHECK(title <= 2);                     // the summary takes one or two lines
      CHECK(lines.size() == title + 1 + 6);  // then the title and six trials
      lines.erase(lines.begin(), lines.begin() + static_cast<long>(title) - 1);
      CHECK(text.find("_END") != std::string::npos);  // the long name's end stays
      CHECK(text.find("trial_00001_") != std::string::npos);
      by_width[width] = lines;
    }
    // Wider terminals show more: the parameter columns appear, the long name gets room.
    CHECK(by_width[80][1].find("optimizer.name") == std::string::npos);
    CHECK(by_width[200][1].find("optimizer.name") != std::string::npos);
    CHECK(by_width[200][1].find("lr") != std::string::npos);
    CHECK(ui::display_width(by_width[120][3]) >= ui::display_width(by_width[80][3]));
    // The essential columns are there at 80.
    for (const char* title : {"trial", "status", "iter", "loss", "best"})
      CHECK(by_width[80][1].find(title) != std::string::npos);
  }
}

TEST_CASE("the live table at 80 columns, exactly", "[ui][live_table]") {
  ScratchDir d;
  auto e = experiment(d);
  auto s = fixture(e);
  s.trials.resize(3);
  s.total_trials = 3;
  s.next_index = 3;
  ui::TableOptions o;
  o.tty = true;
  ui::LiveTable table(o);
  std::string text = table.render({1.0, s, e}, 80, 50);
  // Elapsed 100 s; done 3 + 4 + 10 of 30 iterations: eta 13 x 100 / 17 = 76.5 s.
  const char* expected =
      "== fit == 2 RUNNING, 1 TERMINATED | best loss=0.33333 (00002) | elapsed 00:01:40\n"
      "eta ~00:01:16\n"
      "trial                                   status      iter     loss     best  lr\n"
      "trial_00000_lr=0.1,optimizer.name=adam  RUNNING        3        1      0.5  0.1\n"
      "trial_00001_xxxxxxx\u2026xxxxxxxxxxxxxx_END  RUNNING        4      0.5     0.25  0.01\n"
      "trial_00002_\u5b66\u7fd2\u7387=\u2026yyyyyyyyyyyy_\u2713tail  TERMINATED    10  0.33333  "
      "0.16667  0.1\n";
  CHECK(text == expected);
}

TEST_CASE("ETA from an iteration bound or trials finished, capped by the budget", "[ui]") {
  ScratchDir d;
  auto e = experiment(d);
  auto s = fixture(e);
  // training_iteration <= 10: done = 3 + 4 + 10 + 10 + 10 = 37 of 80 iterations in 100 s.
  auto eta = ui::eta_seconds(s, e, 100);
  REQUIRE(eta);
  CHECK(*eta == Approx((80.0 - 37.0) * 100.0 / 37.0));
  // No iteration bound: three of eight trials finished in 100 s (10 iterations each), and the
  // two running ones are 3/10 and 4/10 of the way: 3.7 of 8 trials done.
  auto free = experiment(d, "");
  free.stop.clear();
  CHECK(*ui::eta_seconds(s, free, 100) == Approx((8.0 - 3.7) * 100.0 / 3.7));
  // A running trial's progress shrinks the ETA, and one past the typical length counts 95%.
  s.trials[0].iteration = 30;
  CHECK(*ui::eta_seconds(s, free, 100) == Approx((8.0 - 4.35) * 100.0 / 4.35));
  s.trials[0].iteration = 3;
  // A scheduler's max_t bounds it too (the smaller of the two wins).
  free.scheduler.kind = spec::SchedulerKind::kAsha;
  free.scheduler.max_t = 5;
  CHECK(*ui::eta_seconds(s, free, 100) == Approx((40.0 - 22.0) * 100.0 / 22.0));
  e.time_budget_s = 150;
  CHECK(*ui::eta_seconds(s, e, 100) == Approx(50));
  // Nothing done yet: unknown.
  for (auto& t : s.trials) t.status = trial::Status::kPending, t.iteration = 0;
  CHECK_FALSE(ui::eta_seconds(s, e, 100));
}

TEST_CASE("progress_reporter chooses columns and rows and order; --columns overrides", "[ui]") {
  ScratchDir d;
  auto e = experiment(d, R"(
progress_reporter:
  metric_columns: {loss: L, acc: accuracy}
  parameter_columns: [optimizer.name]
  max_rows: 3
  sort_by_metric: true
)");
  auto s = fixture(e);
  ui::TableOptions o;
  o.tty = true;
  ui::LiveTable table(o);
  auto lines = plain_lines_of(table.render({1.0, s, e}, 200, 50));
  INFO(lines[1]);
  CHECK(lines[1].find(" L ") != std::string::npos);
  CHECK(lines[1].find("accuracy") != std::string::npos);  // never reported: shown empty
  CHECK(lines[1].find("optimizer.name") != std::string::npos);
  CHECK(lines[1].find(" lr") == std::string::npos);
  REQUIRE(lines.size() == 1 + 1 + 3 + 1);  // summary, title, 3 rows, "... more"
  CHECK(lines[5] == "... 3 more trials");
  // Best loss first: trial 4 (ERROR, 0.2), then 3 (0.25), then 2.
  CHECK(lines[2].starts_with("trial_00004"));
  CHECK(lines[3].starts_with("trial_00003"));

  o.columns = std::get<std::vector<std::string>>(ui::parse_columns_flag("time_total_s, config/lr"));
  ui::LiveTable flagged(o);
  auto fl = plain_lines_of(flagged.render({1.0, s, e}, 200, 50));
  CHECK(fl[1].find("time_total_s") != std::string::npos);
  CHECK(fl[1].find(" lr") != std::string::npos);
  CHECK(fl[1].find("optimizer.name") == std::string::npos);
  CHECK(fl[1].find("accuracy") == std::string::npos);
  CHECK(std::holds_alternative<std::string>(ui::parse_columns_flag("loss,,acc")));
  CHECK(std::holds_alternative<std::string>(ui::parse_columns_flag("config/")));

  // A short terminal shows fewer rows than max_rows.
  e.progress_reporter.max_rows = 20;
  auto few = plain_lines_of(table.render({1.0, s, e}, 200, 7));
  CHECK(few.size() == 1 + 1 + 3 + 1);  // one line left for the cursor
  CHECK(few.back() == "... 3 more trials");
}

TEST_CASE("progress_reporter errors are one line with the place", "[ui][spec]") {
  auto error_of = [](const std::string& extra) {
    auto r = spec::parse_experiment(
        "trial: {command: [t]}\nparam_space: {lr: 0.1}\nmetric: loss\nmode: min\n" + extra,
        "exp.yaml");
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find('\n') == std::string::npos);
    return r.error().message;
  };
  CHECK(error_of("progress_reporter: {max_row: 3}\n") ==
        "exp.yaml:5:21: unknown key 'max_row' in progress_reporter (did you mean 'max_rows'?)");
  CHECK(error_of("progress_reporter: {max_rows: many}\n").starts_with("exp.yaml:5:"));
  CHECK(error_of("progress_reporter: {max_rows: 0}\n").find("max_rows must be >= 1") !=
        std::string::npos);
  CHECK(error_of("progress_reporter: {metric_columns: 3}\n").find("expected a list") !=
        std::string::npos);
  CHECK(error_of("progress_reporter: {sort_by_metric: maybe}\n").find("true or false") !=
        std::string::npos);
  CHECK(error_of("progress_reporter: [1]\n").starts_with("exp.yaml:5:"));
  CHECK(error_of("progress_reporter: {max_report_frequency: 0}\n") ==
        "exp.yaml:5:43: progress_reporter.max_report_frequency must be between 0.05 and 86400 "
        "seconds");
  CHECK(
      error_of("progress_reporter: {max_report_frequency: soon}\n").starts_with("exp.yaml:5:43:"));
  CHECK(
      error_of("progress_reporter: {max_report_frequency: .nan}\n").starts_with("exp.yaml:5:43:"));
  auto ok = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {lr: 0.1}\nprogress_reporter: {max_report_frequency: "
      "5}\n",
      "exp.yaml");
  REQUIRE(ok);
  CHECK(ok->progress_reporter.max_report_frequency == 5.0);
  auto r = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {lr: 0.1}\nprogress_reporter: {sort_by_metric: true}\n",
      "exp.yaml");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("needs a top-level 'metric'") != std::string::npos);
}

TEST_CASE("off a terminal: plain lines of status changes and a summary without escapes",
          "[ui][live_table]") {
  ScratchDir d;
  auto e = experiment(d);
  auto s = fixture(e);
  std::string out;
  ui::TableOptions o;
  o.tty = false;
  o.period_s = 10;
  o.width = ui::kUnlimitedWidth;
  ui::LiveTable table(o, &out);
  table.on_progress({0.0, s, e}, false);
  CHECK(out.find('\x1b') == std::string::npos);
  CHECK(out.find("trial trial_00000_lr=0.1,optimizer.name=adam: RUNNING at iter 3\n") !=
        std::string::npos);
  CHECK(out.find("trial_00005") == std::string::npos);  // pending from the start: not news
  CHECK(out.find("== fit == 2 RUNNING") != std::string::npos);
  out.clear();
  table.on_progress({5.0, s, e}, false);  // no change, and the summary is not due
  CHECK(out.empty());
  s.trials[0].status = trial::Status::kTerminated;
  s.trials[0].iteration = 10;
  table.on_progress({11.0, s, e}, false);
  auto lines = plain_lines_of(out);
  REQUIRE(lines.size() == 4);  // the change, the summary, the running trials' table
  CHECK(lines[0] == "trial trial_00000_lr=0.1,optimizer.name=adam: TERMINATED at iter 10");
  CHECK(lines[1].find("elapsed 00:01:51") != std::string::npos);  // 100 s + 11 s of this run
  CHECK(lines[2].starts_with("trial"));                           // the table's header
  CHECK(lines[3].starts_with("trial_00001_"));                    // the one still running
  CHECK(lines[3].find("RUNNING") != std::string::npos);
}

TEST_CASE("off a terminal: changes within a second, a summary every period (fake clock)",
          "[ui][live_table]") {
  ScratchDir d;
  auto e = experiment(d);
  auto s = fixture(e);
  std::string out;
  ui::TableOptions o;
  o.tty = false;
  o.period_s = 30;
  o.changes_period_s = 1;
  o.width = 200;
  ui::LiveTable table(o, &out);
  table.set_note("max_concurrent_trials is 8 but at most 2 trials fit at once");
  table.on_progress({0.0, s, e}, false);
  CHECK(out.starts_with("note: max_concurrent_trials is 8"));
  CHECK(out.find("trial_00004") != std::string::npos);  // ERROR from the start: told once
  CHECK(table.seconds_until_due(0.0) == Approx(1.0));
  CHECK(table.seconds_until_due(0.4) == Approx(0.6));
  out.clear();
  // A trial ends: told at the next look, a second later at most, without a summary.
  s.trials[1].status = trial::Status::kTerminated;
  s.trials[1].iteration = 10;
  table.on_progress({0.5, s, e}, false);
  CHECK(out.empty());  // looked less than a second ago
  table.on_progress({1.2, s, e}, false);
  auto lines = plain_lines_of(out);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].starts_with("trial trial_00001_"));
  CHECK(lines[0].ends_with(": TERMINATED at iter 10"));
  out.clear();
  // Nothing changes: nothing until the period, then the summary and the running rows again
  // (the note is not repeated).
  for (double t = 2; t < 30; t += 0.7) table.on_progress({t, s, e}, false);
  CHECK(out.empty());
  table.on_progress({30.1, s, e}, false);
  lines = plain_lines_of(out);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].starts_with("== fit == 1 RUNNING, 3 PENDING, 3 TERMINATED, 1 ERROR"));
  CHECK(lines[0].find("best loss=") != std::string::npos);
  CHECK(lines[0].find("elapsed 00:02:10") != std::string::npos);
  CHECK(lines[2].starts_with("trial_00000_"));
  CHECK(out.find("note:") == std::string::npos);
  CHECK(out.find('\x1b') == std::string::npos);
  CHECK(table.seconds_until_due(30.1) <= 1.0);  // the next look for changes, not the summary
  CHECK(table.seconds_until_due(31.2) == 0);
  out.clear();
  // A host event (notable) is told at once; the summary still waits for its period.
  s.hosts = {{"local", "up"}, {"gpu-node-17.cluster.example.org", "unreachable"}};
  table.on_progress({30.2, s, e}, true);
  CHECK(out ==
        "hosts: gpu-node-17.cluster.example.org unreachable (0 running), local up (1 "
        "running)\n");
  out.clear();
  // The end: the last changes and the summary, no table with nothing running.
  for (auto& t : s.trials) t.status = trial::Status::kTerminated;
  table.on_run_end({40.0, s, e});
  lines = plain_lines_of(out);
  REQUIRE(lines.size() == 4);  // trials 0, 4 and 5 changed, then the summary
  CHECK(lines[3].starts_with("== fit == 2 PENDING, 6 TERMINATED"));
  CHECK(out.find("RUNNING") == std::string::npos);
}

TEST_CASE(
    "table options: TERM=dumb is no terminal; max_report_frequency and the env variable "
    "set the period",
    "[ui][live_table]") {
  auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto term = saved("TERM"), period = saved("TUNE_PROGRESS_PERIOD_S"), no_color = saved("NO_COLOR");
  ::setenv("TERM", "dumb", 1);
  ::unsetenv("TUNE_PROGRESS_PERIOD_S");
  ::unsetenv("NO_COLOR");
  CHECK_FALSE(ui::stderr_can_redraw());  // no bar either
  auto o = ui::detect_table_options(false);
  CHECK_FALSE(o.tty);
  CHECK_FALSE(o.color);
  CHECK(o.period_s == ui::kPlainPeriodS);
  CHECK(o.changes_period_s == 1.0);
  o = ui::detect_table_options(true, 5.0);
  CHECK(o.quiet);
  CHECK(o.period_s == 5.0);
  o = ui::detect_table_options(false, 0.25);
  CHECK(o.changes_period_s == 0.25);
  ::setenv("TUNE_PROGRESS_PERIOD_S", "2", 1);
  CHECK(ui::detect_table_options(false, 5.0).period_s == 2.0);
  ::setenv("TUNE_PROGRESS_PERIOD_S", "0", 1);
  CHECK(ui::detect_table_options(false).period_s == 0.05);
  auto restore = [](const char* name, const std::optional<std::string>& v) {
    if (v)
      ::setenv(name, v->c_str(), 1);
    else
      ::unsetenv(name);
  };
  restore("TERM", term);
  restore("TUNE_PROGRESS_PERIOD_S", period);
  restore("NO_COLOR", no_color);
}

TEST_CASE("on a terminal: redrawn in place and erased by the line count it drew",
          "[ui][live_table]") {
  ScratchDir d;
  auto e = experiment(d);
  auto s = fixture(e);
  std::string out;
  ui::TableOptions o;
  o.tty = true;
  o.width = 80;
  o.height = 40;
  ui::LiveTable table(o, &out);
  table.on_progress({0.0, s, e}, false);
  size_t drawn = plain_lines_of(out).size();
  CHECK(out.find("\x1b[") == std::string::npos);  // the first draw erases nothing
  out.clear();
  table.on_progress({1.0, s, e}, false);
  CHECK(out.starts_with("\x1b[" + std::to_string(drawn) + "A\x1b[J"));
  out.clear();
  table.clear();
  CHECK(out == "\x1b[" + std::to_string(drawn) + "A\x1b[J");
  out.clear();
  table.clear();  // nothing on screen any more
  CHECK(out.empty());
}

namespace {
struct Recorder final : control::RunObserver {
  int progress = 0, ends = 0;
  size_t last_trials = 0;
  bool ended_after_progress = false;
  void on_progress(const control::RunSnapshot& snap, bool) override {
    ++progress;
    last_trials = snap.state.trials.size();
  }
  void on_run_end(const control::RunSnapshot& snap) override {
    ++ends;
    ended_after_progress = progress > 0;
    for (const auto& t : snap.state.trials)
      if (t.status != trial::Status::kTerminated) ended_after_progress = false;
  }
  double seconds_until_due(double) const override { return 0.5; }
};
}  // namespace

TEST_CASE("the controller tells its observer of progress and of the run's end",
          "[ui][controller]") {
  ScratchDir d;
  auto e =
      make_exp(d, "name: obs\ntrial: {command: [t]}\nparam_space: {x: {grid_search: [1, 2]}}\n");
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(3, 0); });
  Recorder rec;
  control::Controller c(e, ex, opts(), &rec);
  REQUIRE(c.run() == kExitOk);
  CHECK(rec.progress > 0);
  CHECK(rec.ends == 1);
  CHECK(rec.last_trials == 2);
  CHECK(rec.ended_after_progress);
}

TEST_CASE("a progress bar fits its width and draws only on a terminal", "[ui]") {
  std::string out;
  {
    ui::ProgressBar bar("reading trials", 1000, false, 80, &out);
    bar.show_at_once();
    bar.update(500);
  }
  CHECK(out.empty());  // not a terminal: nothing
  ui::ProgressBar bar("reading trials", 1000, true, 60, &out);
  CHECK(bar.render(450, 60) ==
        "reading trials [" + std::string(12, '#') + std::string(16, '.') + "]  45%  450/1000");
  CHECK(ui::display_width(bar.render(450, 60)) <= 60);
  CHECK(ui::display_width(bar.render(450, 20)) <= 20);
  CHECK(bar.render(5000, 200).find("100%  1000/1000") != std::string::npos);
  bar.update(10);  // within its first moment: quick work prints nothing
  CHECK(out.empty());
  bar.show_at_once();
  bar.update(10);
  CHECK(out.starts_with("\rreading trials ["));
  CHECK(out.ends_with("\x1b[K"));
  out.clear();
  bar.finish();
  CHECK(out == "\r\x1b[K");
  out.clear();
  bar.finish();
  CHECK(out.empty());
  // Bytes: the counts in the total's unit.
  ui::ProgressBar bytes("copying experiment", 2'500'000'000, true, 80, &out);
  bytes.count_bytes();
  CHECK(bytes.render(1'300'000'000, 200).ends_with("]  52%  1.3/2.5 GB"));
  ui::ProgressBar small("copying restore_from", 3'400'000, true, 80, &out);
  small.count_bytes();
  CHECK(small.render(0, 200).ends_with("]  0%  0.0/3.4 MB"));
  CHECK(ui::display_width(small.render(1'000'000, 30)) <= 30);
}

TEST_CASE("a progress bar at 80 columns (snapshot)", "[ui]") {
  std::string out;
  ui::ProgressBar bar("pulling checkpoints", 12, true, 80, &out);
  bar.show_at_once();
  bar.update(5);
  // 79 cells at most (never the last column); a 40-cell bar, 5/12 of it filled.
  CHECK(out == "\rpulling checkpoints [################........................]  41%  5/12\x1b[K");
  out.clear();
  bar.update(12);
  CHECK(out ==
        "\rpulling checkpoints [########################################]  100%  12/12\x1b[K");
  // A long or hostile label is cut to fit, escape sequences in it made harmless.
  ui::ProgressBar evil(std::string(100, 'x') + "\x1b[2J", 3, true, 80, &out);
  for (size_t done : {size_t(0), size_t(2), size_t(3)}) {
    std::string line = evil.render(done, 79);
    CHECK(ui::display_width(line) <= 79);
    CHECK(line.find('\x1b') == std::string::npos);
  }
  out.clear();
  ui::ProgressBar::erase_current();  // the log sink's call before a line: the bar is erased
  CHECK(out == "\r\x1b[K");
  out.clear();
  bar.finish();  // already erased: nothing more
  CHECK(out.empty());
}

TEST_CASE("staged progress: one bar per stage, nothing without a terminal", "[ui]") {
  std::string out;
  {
    ui::StagedProgress off(false, 80, &out);
    off.show_at_once();
    off.update("reading state", 1, 2);
    off.finish();
  }
  CHECK(out.empty());
  ui::StagedProgress p(true, 80, &out);
  p.show_at_once();
  p.update("reading state", 1 << 20, 4 << 20);
  CHECK(out.starts_with("\rreading state ["));
  CHECK(out.find("25%  1048576/4194304") != std::string::npos);
  out.clear();
  p.update("checking trials", 0, 10);  // a new stage: the old bar erased, the new one drawn
  CHECK(out.starts_with("\r\x1b[K\rchecking trials ["));
  out.clear();
  p.finish();
  CHECK(out == "\r\x1b[K");
  out.clear();
  p.finish();
  CHECK(out.empty());
}
