#include "util/json_ext.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace tune::util {

using json = nlohmann::json;

namespace {

// What a bare `null` of the rewritten text stands for, in document order.
enum class NullToken : uint8_t { kNull, kNaN, kInfinity, kMinusInfinity };

// The text with every bare NaN/Infinity/-Infinity outside strings replaced by `null`, and what
// each bare `null` of the result stands for. False if nesting goes deeper than `max_depth`.
// (In valid JSON, letters outside strings only spell true, false, null and exponents, so the
// nulls counted here are exactly the null values nlohmann's parser reports, in order.)
bool rewrite_non_finite(std::string_view in, size_t max_depth, std::string& out,
                        std::vector<NullToken>& tokens) {
  out.reserve(in.size() + 16);
  size_t depth = 0;
  size_t i = 0;
  while (i < in.size()) {
    char c = in[i];
    if (c == '"') {  // copy the whole string: nothing inside it is a token
      size_t j = i + 1;
      while (j < in.size() && in[j] != '"') j += in[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, in.size());
      out.append(in.substr(i, j - i));
      i = j;
      continue;
    }
    std::string_view rest = in.substr(i);
    if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      depth -= depth > 0 ? 1 : 0;
    } else if (rest.starts_with("NaN")) {
      out += "null", tokens.push_back(NullToken::kNaN), i += 3;
      continue;
    } else if (rest.starts_with("Infinity")) {
      out += "null", tokens.push_back(NullToken::kInfinity), i += 8;
      continue;
    } else if (rest.starts_with("-Infinity")) {
      out += "null", tokens.push_back(NullToken::kMinusInfinity), i += 9;
      continue;
    } else if (rest.starts_with("null")) {
      out += "null", tokens.push_back(NullToken::kNull), i += 4;
      continue;
    }
    out.push_back(c);
    ++i;
  }
  return true;
}

using Progress = std::function<void(size_t, size_t)>;

// A pointer into the text that calls `progress` each time it crosses a MiB boundary, so that
// nlohmann's parser reports how far it got without a change to it.
class CountingIt {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  CountingIt() = default;
  CountingIt(const char* p, std::string_view whole, const Progress* progress)
      : p_(p), whole_(whole), progress_(progress) {}
  reference operator*() const { return *p_; }
  CountingIt& operator++() {
    ++p_;
    auto at = static_cast<size_t>(p_ - whole_.data());
    if ((at & kStep) == 0 && progress_ && *progress_) (*progress_)(at, whole_.size());
    return *this;
  }
  CountingIt operator++(int) {
    CountingIt old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIt& o) const { return p_ == o.p_; }

 private:
  static constexpr size_t kStep = (1u << 20) - 1;
  const char* p_ = nullptr;
  std::string_view whole_;
  const Progress* progress_ = nullptr;
};

// json::parse over `text`, reporting progress when asked to.
json parse_counted(std::string_view text, const json::parser_callback_t& cb,
                   const Progress* progress) {
  if (!progress || !*progress) return json::parse(text, cb, false);
  return json::parse(CountingIt(text.data(), text, progress),
                     CountingIt(text.data() + text.size(), text, progress), cb, false);
}

json parse_rewritten(std::string_view text, size_t max_depth, const Progress* progress) {
  std::string rewritten;
  std::vector<NullToken> tokens;
  if (!rewrite_non_finite(text, max_depth, rewritten, tokens)) return json::value_t::discarded;
  if (std::none_of(tokens.begin(), tokens.end(), [](NullToken t) { return t != NullToken::kNull; }))
    return parse_counted(rewritten, nullptr, progress);
  size_t next = 0;
  bool mismatch = false;
  json::parser_callback_t restore = [&](int, json::parse_event_t event, json& value) {
    if (event != json::parse_event_t::value || !value.is_null()) return true;
    if (next >= tokens.size()) {
      mismatch = true;
      return true;
    }
    constexpr double kInf = std::numeric_limits<double>::infinity();
    switch (tokens[next++]) {
      case NullToken::kNull:
        break;
      case NullToken::kNaN:
        value = std::numeric_limits<double>::quiet_NaN();
        break;
      case NullToken::kInfinity:
        value = kInf;
        break;
      case NullToken::kMinusInfinity:
        value = -kInf;
        break;
    }
    return true;
  };
  json j = parse_counted(rewritten, restore, progress);
  if (mismatch || (!j.is_discarded() && next != tokens.size())) return json::value_t::discarded;
  return j;
}

void write_ext(const json& j, std::string& out) {
  switch (j.type()) {
    case json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out.push_back(',');
        first = false;
        out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
        out.push_back(':');
        write_ext(*it, out);
      }
      out.push_back('}');
      return;
    }
    case json::value_t::array: {
      out.push_back('[');
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out.push_back(',');
        write_ext(j[i], out);
      }
      out.push_back(']');
      return;
    }
    case json::value_t::number_float: {
      double d = j.get<double>();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += j.dump();
      return;
    }
    default:
      out += j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

namespace {

json parse_ext(std::string_view text, size_t max_depth, const Progress* progress) noexcept {
  try {
    // Fast path (nearly every line): no token to restore, and too short or too few brackets to
    // nest deeper than allowed.
    bool tokens = text.find("NaN") != std::string_view::npos ||
                  text.find("Infinity") != std::string_view::npos;
    bool shallow = text.size() <= max_depth ||
                   static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
                     return c == '{' || c == '[';
                   })) <= max_depth;
    if (!tokens && shallow) return parse_counted(text, nullptr, progress);
    return parse_rewritten(text, max_depth, progress);
  } catch (...) {  // bad_alloc: treat as unparsable rather than end the driver
    return json::value_t::discarded;
  }
}

}  // namespace

json parse_json_ext(std::string_view text, size_t max_depth) noexcept {
  return parse_ext(text, max_depth, nullptr);
}

json parse_json_ext(std::string_view text, size_t max_depth,
                    const std::function<void(size_t, size_t)>& progress) noexcept {
  return parse_ext(text, max_depth, &progress);
}

JsonShape json_shape(std::string_view text) {
  JsonShape shape;
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      shape.depth = std::max(shape.depth, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = text.find_first_not_of("0123456789+-.eE", i);
      if (end == std::string_view::npos) end = text.size();
      std::string token(text.substr(i, std::min<size_t>(end - i, 400)));
      if (!std::isfinite(std::strtod(token.c_str(), nullptr))) shape.overflow = true;
      i = end - 1;
    }
  }
  return shape;
}

bool has_non_finite(const json& j) {
  switch (j.type()) {
    case json::value_t::object:
    case json::value_t::array:
      for (const auto& v : j)
        if (has_non_finite(v)) return true;
      return false;
    case json::value_t::number_float:
      return !std::isfinite(j.get<double>());
    default:
      return false;
  }
}

void dump_json_ext(const json& j, std::string& out) {
  if (!has_non_finite(j)) {
    out += j.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  write_ext(j, out);
}

std::string dump_json_ext(const json& j) {
  std::string out;
  dump_json_ext(j, out);
  return out;
}

}  // namespace tune::util
