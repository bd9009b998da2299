// What both modes of tune-agent (main.cpp: `serve`, on the driver's machine; remote.hpp: on an
// SSH worker host) say to the driver: one JSON object per line on stdout, each line one write,
// so lines written by several processes never interleave.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace tune::agent_app {

// A supervisor the agent started, by its pid.
struct Child {
  std::string id;  // the driver's trial id
  int attempt = 0;
};

// This host's monotonic clock, in ms (the agent's heartbeat and watches time themselves by it).
[[nodiscard]] int64_t monotonic_ms();

// Lines to stdout are queued from now on, and written without blocking as the driver reads
// them (flush_output, when stdout is writable): the remote agent, whose output events carry
// trials' bytes, must go on answering requests and relaying exits while the driver or the link
// is slow. (Not on the driver's machine: its supervisors write to the same stdout.)
void queue_output();
// Writes what is queued that stdout takes now; bytes still queued.
size_t flush_output();
// Bytes queued for stdout (0 unless queue_output was called).
[[nodiscard]] size_t queued_output();

void emit(const std::string& line);
// `event` as one line (bytes that are not UTF-8, in a path or a message, are replaced).
void emit(const nlohmann::json& event);
// An "error" event; `op`, `id` and `attempt`, when known, name the request it answers.
void emit_error(const std::string& message, const std::string& op = "", const std::string& id = "",
                int attempt = 0);
// Reaps the supervisors in `children` that ended, saying "gone" for each (exit status, or 128
// + the signal that killed it), each after `before_gone` runs (what a supervisor said before it
// ended goes first); returns those it reaped. Another child of the agent that ended goes to
// `other` (its pid and wait status).
std::vector<Child> reap_children(std::unordered_map<pid_t, Child>& children,
                                 const std::function<void()>& before_gone = {},
                                 const std::function<void(pid_t, int)>& other = {});

}  // namespace tune::agent_app
