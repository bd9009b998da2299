// The warnings and errors spdlog logs while a LogCapture lives, for tests that check what a
// user would read in tune.log.
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace tune::testing {

struct LogCapture {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100);
  std::shared_ptr<spdlog::logger> old = spdlog::default_logger();
  LogCapture() {
    auto l = std::make_shared<spdlog::logger>("capture", sink);
    l->set_level(spdlog::level::warn);
    spdlog::set_default_logger(l);
  }
  ~LogCapture() { spdlog::set_default_logger(old); }
  std::string text() const {
    std::string s;
    for (const auto& line : sink->last_formatted()) s += line;
    return s;
  }
};

}  // namespace tune::testing
