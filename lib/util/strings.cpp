#include "util/strings.hpp"

#include "util/utf8.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace tune::util {

Result<std::vector<std::string>> shell_split(std::string_view line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  size_t i = 0;
  while (i < line.size()) {
    char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(cur)), cur.clear(), in_word = false;
      ++i;
    } else if (c == '\'') {
      size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos) return fail("unterminated single quote in command");
      cur.append(line.substr(i + 1, end - i - 1));
      in_word = true;
      i = end + 1;
    } else if (c == '"') {
      ++i;
      in_word = true;
      bool closed = false;
      while (i < line.size()) {
        char d = line[i];
        if (d == '"') {
          closed = true;
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < line.size() &&
            std::string_view("\"\\$`\n").find(line[i + 1]) != std::string_view::npos) {
          if (line[i + 1] != '\n') cur.push_back(line[i + 1]);
          i += 2;
          continue;
        }
        cur.push_back(d);
        ++i;
      }
      if (!closed) return fail("unterminated double quote in command");
    } else if (c == '\\') {
      if (i + 1 >= line.size()) return fail("trailing backslash in command");
      if (line[i + 1] != '\n') cur.push_back(line[i + 1]), in_word = true;
      i += 2;
    } else {
      cur.push_back(c);
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

Result<std::string> random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  for (size_t got = 0; got < raw.size();) {
    ssize_t n = ::getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot draw random bytes: ", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : raw) hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  return hex;
}

std::string shell_quote(std::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) ||
               std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
      }))
    return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<std::string> suggest(std::string_view word,
                                   std::span<const std::string_view> candidates) {
  std::optional<std::string> best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (auto c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = std::string(c);
  }
  return best;
}

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string format_short(double v, int digits) {
  if (std::isnan(v) || std::isinf(v)) return format_double(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::vector<std::string> fill_template(std::string_view tmpl, const std::string& source,
                                       const std::string& target) {
  std::vector<std::string> out;
  auto words = shell_split(tmpl);
  if (!words) return out;
  for (const auto& word : *words) {
    std::string filled;
    for (size_t i = 0; i < word.size();) {
      if (word.compare(i, 8, "{source}") == 0) {
        filled += source;
        i += 8;
      } else if (word.compare(i, 8, "{target}") == 0) {
        filled += target;
        i += 8;
      } else {
        filled += word[i++];
      }
    }
    out.push_back(std::move(filled));
  }
  return out;
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = utf8_sequence_at(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) {
    auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? '?' : c);
  }
  if (s.size() > max) out += "...";
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

}  // namespace tune::util
