// tune/trial.hpp: the trial side of tune's protocol for C++ programs. Header-only, C++17,
// no dependencies. Function mode:
//
//   auto cfg = tune_trial::config();
//   double lr = cfg["lr"].number(0.01);
//   if (auto ckpt = tune_trial::get_checkpoint()) load(*ckpt);
//   for (int epoch = 0; ...; ++epoch) {
//     std::string dir = tune_trial::make_checkpoint_dir();   // fresh, in the staging dir
//     save(dir);
//     tune_trial::report({{"loss", loss}, {"accuracy", acc}}, dir);
//   }
//
// Step mode: derive from tune_trial::Trainable and `return tune_trial::run_trainable(t);`.
#pragma once

#include <unistd.h>

#include <sys/stat.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tune_trial {

// A parsed JSON value (enough for configs and protocol commands).
class Value {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Value() = default;
  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  double number(double fallback = 0) const { return type_ == Type::kNumber ? num_ : fallback; }
  bool boolean(bool fallback = false) const { return type_ == Type::kBool ? b_ : fallback; }
  const std::string& str() const { return str_; }
  std::string string(const std::string& fallback = "") const {
    return type_ == Type::kString ? str_ : fallback;
  }
  const std::vector<Value>& items() const { return arr_; }
  const std::map<std::string, Value>& members() const { return obj_; }
  // Member lookup; a missing key gives a null value.
  const Value& operator[](const std::string& key) const {
    static const Value null;
    auto it = obj_.find(key);
    return it == obj_.end() ? null : it->second;
  }
  bool contains(const std::string& key) const { return obj_.count(key) != 0; }

  // Parses JSON text; throws std::runtime_error on malformed input.
  static Value parse(const std::string& text) {
    size_t i = 0;
    Value v = parse_at(text, i);
    skip_ws(text, i);
    if (i != text.size()) throw std::runtime_error("tune_trial: trailing characters in JSON");
    return v;
  }

 private:
  static void skip_ws(const std::string& s, size_t& i) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  static Value parse_at(const std::string& s, size_t& i) {
    skip_ws(s, i);
    if (i >= s.size()) throw std::runtime_error("tune_trial: unexpected end of JSON");
    Value v;
    char c = s[i];
    if (c == '{') {
      v.type_ = Type::kObject;
      ++i;
      skip_ws(s, i);
      if (i < s.size() && s[i] == '}') return ++i, v;
      for (;;) {
        skip_ws(s, i);
        Value key = parse_at(s, i);
        if (key.type_ != Type::kString)
          throw std::runtime_error("tune_trial: object key must be a string");
        skip_ws(s, i);
        if (i >= s.size() || s[i] != ':') throw std::runtime_error("tune_trial: expected ':'");
        ++i;
        v.obj_[key.str_] = parse_at(s, i);
        skip_ws(s, i);
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == '}') return ++i, v;
        throw std::runtime_error("tune_trial: expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.type_ = Type::kArray;
      ++i;
      skip_ws(s, i);
      if (i < s.size() && s[i] == ']') return ++i, v;
      for (;;) {
        v.arr_.push_back(parse_at(s, i));
        skip_ws(s, i);
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        if (i < s.size() && s[i] == ']') return ++i, v;
        throw std::runtime_error("tune_trial: expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type_ = Type::kString;
      ++i;
      while (i < s.size() && s[i] != '"') {
        if (s[i] == '\\' && i + 1 < s.size()) {
          char e = s[++i];
          switch (e) {
            case 'n':
              v.str_ += '\n';
              break;
            case 't':
              v.str_ += '\t';
              break;
            case 'r':
              v.str_ += '\r';
              break;
            case 'b':
              v.str_ += '\b';
              break;
            case 'f':
              v.str_ += '\f';
              break;
            case 'u': {
              unsigned cp = static_cast<unsigned>(std::stoul(s.substr(i + 1, 4), nullptr, 16));
              i += 4;
              if (cp < 0x80)
                v.str_ += static_cast<char>(cp);
              else if (cp < 0x800)
                v.str_ += static_cast<char>(0xC0 | (cp >> 6)),
                    v.str_ += static_cast<char>(0x80 | (cp & 0x3F));
              else
                v.str_ += static_cast<char>(0xE0 | (cp >> 12)),
                    v.str_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                    v.str_ += static_cast<char>(0x80 | (cp & 0x3F));
              break;
            }
            default:
              v.str_ += e;
          }
          ++i;
        } else {
          v.str_ += s[i++];
        }
      }
      if (i >= s.size()) throw std::runtime_error("tune_trial: unterminated string");
      ++i;
      return v;
    }
    if (s.compare(i, 4, "true") == 0) {
      v.type_ = Type::kBool;
      v.b_ = true;
      i += 4;
      return v;
    }
    if (s.compare(i, 5, "false") == 0) {
      v.type_ = Type::kBool;
      v.b_ = false;
      i += 5;
      return v;
    }
    if (s.compare(i, 4, "null") == 0) {
      i += 4;
      return v;
    }
    const char* start = s.c_str() + i;
    char* end = nullptr;
    double d = std::strtod(start, &end);
    if (end == start) throw std::runtime_error("tune_trial: invalid JSON value");
    i += static_cast<size_t>(end - start);
    v.type_ = Type::kNumber;
    v.num_ = d;
    return v;
  }

  Type type_ = Type::kNull;
  bool b_ = false;
  double num_ = 0;
  std::string str_;
  std::vector<Value> arr_;
  std::map<std::string, Value> obj_;
};

inline std::string env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

// The trial's config, from TUNE_CONFIG, else from TUNE_CONFIG_FILE (tune leaves TUNE_CONFIG
// out for a config over Linux's 128 KiB limit on one variable); an empty object outside tune.
inline Value config() {
  if (const char* text = std::getenv("TUNE_CONFIG")) return Value::parse(text);
  std::string file = env("TUNE_CONFIG_FILE");
  if (file.empty()) return Value::parse("{}");
  std::ifstream in(file);
  if (!in) throw std::runtime_error("tune: cannot read TUNE_CONFIG_FILE " + file);
  std::stringstream text;
  text << in.rdbuf();
  return Value::parse(text.str());
}

inline std::string trial_dir() {
  std::string d = env("TUNE_TRIAL_DIR");
  if (!d.empty()) return d;
  char buf[4096];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string(".");
}

// The checkpoint directory to resume from, if the trial is resuming.
inline std::optional<std::string> get_checkpoint() {
  std::string c = env("TUNE_RESTORE_CHECKPOINT");
  if (c.empty()) return std::nullopt;
  return c;
}

// A fresh, empty directory to write a checkpoint into: in the trial's staging dir
// (TUNE_CHECKPOINT_STAGING, else the trial dir) under a `.staged_checkpoint_*` name, which the
// driver removes if the trial dies before reporting it; outside tune, a new directory under
// the temp dir (never the current directory).
inline std::string make_checkpoint_dir() {
  static int counter = 0;
  std::string root = env("TUNE_CHECKPOINT_STAGING", env("TUNE_TRIAL_DIR"));
  if (root.empty()) {
    std::string tmpl = env("TMPDIR", "/tmp") + "/tune_checkpoint_XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("tune_trial: cannot create " + tmpl);
    return tmpl;
  }
  mkdir(root.c_str(), 0755);  // the staging dir may not exist yet
  std::string dir =
      root + "/.staged_checkpoint_" + std::to_string(getpid()) + "_" + std::to_string(++counter);
  if (mkdir(dir.c_str(), 0755) != 0) throw std::runtime_error("tune_trial: cannot create " + dir);
  return dir;
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

// A number as JSON, except NaN and infinities, which are written as Python's json.dumps writes
// them (NaN, Infinity, -Infinity); tune reads them back as such.
inline std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// One metric: a number, or (with the string constructor) a text value.
struct Metric {
  std::string key;
  std::string json;
  Metric(std::string k, double v) : key(std::move(k)), json(json_number(v)) {}
  Metric(std::string k, int v) : key(std::move(k)), json(std::to_string(v)) {}
  Metric(std::string k, long v) : key(std::move(k)), json(std::to_string(v)) {}
  Metric(std::string k, bool v) : key(std::move(k)), json(v ? "true" : "false") {}
  Metric(std::string k, const char* v) : key(std::move(k)), json(json_string(v)) {}
  Metric(std::string k, const std::string& v) : key(std::move(k)), json(json_string(v)) {}
};

namespace detail {
inline std::ostream*& out() {
  static std::ostream* o = &std::cout;
  return o;
}
inline void write_line(const std::string& line) {
  (*out()) << line << '\n';
  out()->flush();
}
}  // namespace detail

// Reports one result. With `checkpoint_dir` (a finished directory inside the trial dir, e.g.
// from make_checkpoint_dir()), the driver takes it over as the trial's next checkpoint.
inline void report(const std::vector<Metric>& metrics, const std::string& checkpoint_dir = "") {
  std::string line = "{";
  for (size_t i = 0; i < metrics.size(); ++i) {
    if (i) line += ",";
    line += json_string(metrics[i].key) + ":" + metrics[i].json;
  }
  if (!checkpoint_dir.empty())
    line +=
        std::string(metrics.empty() ? "" : ",") + "\"checkpoint\":" + json_string(checkpoint_dir);
  line += "}";
  detail::write_line(line);
}

// Step mode (the driver drives the loop over stdin; see docs/TRIAL_PROTOCOL.md).
class Trainable {
 public:
  virtual ~Trainable() = default;
  virtual std::vector<Metric> step() = 0;
  virtual void save_checkpoint(const std::string& dir) { (void)dir; }
  virtual void load_checkpoint(const std::string& dir) { (void)dir; }
  virtual bool reset_config(const Value& config) {
    (void)config;
    return false;
  }
  virtual void cleanup() {}
};

// Serves the step-mode protocol until {"op":"stop"} or end of input; returns the exit code.
inline int run_trainable(Trainable& t, std::istream& in = std::cin) {
  if (auto c = get_checkpoint()) t.load_checkpoint(*c);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Value cmd;
    try {
      cmd = Value::parse(line);
    } catch (const std::exception&) {
      std::cerr << "tune_trial: ignoring a malformed command line\n";
      continue;
    }
    std::string op = cmd["op"].string();
    if (op == "step") {
      report(t.step());
    } else if (op == "save") {
      std::string p = cmd["path"].string();
      mkdir(p.c_str(), 0755);
      t.save_checkpoint(p);
      detail::write_line("{\"saved\":" + json_string(p) + "}");
    } else if (op == "restore") {
      std::string p = cmd["path"].string();
      t.load_checkpoint(p);
      detail::write_line("{\"restored\":" + json_string(p) + "}");
    } else if (op == "reset") {
      bool ok = t.reset_config(cmd["config"]);
      detail::write_line(std::string("{\"reset\":") + (ok ? "true" : "false") + "}");
    } else if (op == "stop") {
      break;
    }
  }
  t.cleanup();
  return 0;
}

}  // namespace tune_trial
