#include "report/row_scan.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "util/utf8.hpp"

namespace tune::report {

namespace {

// Nesting the scanner follows inside a value; deeper lines go to the full parser.
constexpr int kMaxDepth = 60;

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  bool row(std::vector<RowField>& fields) {
    fields.clear();
    ws();
    if (!eat('{')) return false;
    ws();
    if (!eat('}')) {
      do {
        ws();
        RowField f;
        if (!key(f.key)) return false;
        ws();
        if (!eat(':')) return false;
        ws();
        if (!member_value(f)) return false;
        fields.push_back(f);
        ws();
      } while (eat(','));
      if (!eat('}')) return false;
    }
    ws();
    return i_ == s_.size();
  }

 private:
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n'))
      ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }
  // Steps over the well-formed UTF-8 sequence of a non-ASCII byte at s_[i_] (false: not one;
  // the full parser rejects it too).
  bool utf8() {
    size_t len = util::utf8_sequence_at(s_, i_);
    i_ += len;
    return len != 0;
  }
  // A key without escapes (those: the full parser), as its bytes, which are then the key's.
  bool key(std::string_view& out) {
    if (!eat('"')) return false;
    size_t start = i_;
    while (i_ < s_.size()) {
      auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        out = s_.substr(start, i_ - start);
        ++i_;
        return true;
      }
      if (c == '\\' || c < 0x20) return false;
      if (c < 0x80)
        ++i_;
      else if (!utf8())
        return false;
    }
    return false;
  }
  // A string value, skipped; its escapes checked as JSON defines them.
  bool skip_string() {
    if (!eat('"')) return false;
    while (i_ < s_.size()) {
      auto c = static_cast<unsigned char>(s_[i_]);
      if (c >= 0x80) {
        if (!utf8()) return false;
        continue;
      }
      ++i_;
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (i_ >= s_.size()) return false;
      char e = s_[i_++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k, ++i_)
          if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return false;
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return false;
      }
    }
    return false;
  }
  static bool digit(char c) { return c >= '0' && c <= '9'; }
  // A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number(RowField& f) {
    size_t start = i_;
    bool integer = true;
    eat('-');
    if (eat('0')) {
    } else if (i_ < s_.size() && digit(s_[i_]) && s_[i_] != '0') {
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    } else {
      return false;
    }
    if (eat('.')) {
      integer = false;
      if (i_ >= s_.size() || !digit(s_[i_])) return false;
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integer = false;
      ++i_;
      if (!eat('+')) eat('-');
      if (i_ >= s_.size() || !digit(s_[i_])) return false;
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    }
    auto [end, ec] = std::from_chars(s_.data() + start, s_.data() + i_, f.value);
    // Out of double's range: the full parser decides what it is.
    if (ec != std::errc() || end != s_.data() + i_) return false;
    if (integer && f.value == 0) f.value = 0;  // "-0" is the integer 0 to the full parser
    f.is_number = true;
    f.integer = integer;
    return true;
  }
  bool member_value(RowField& f) {
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (c == 'N' || c == 'I' || (c == '-' && i_ + 1 < s_.size() && s_[i_ + 1] == 'I')) {
      if (literal("NaN"))
        f.value = std::numeric_limits<double>::quiet_NaN();
      else if (literal("Infinity"))
        f.value = kInf;
      else if (literal("-Infinity"))
        f.value = -kInf;
      else
        return false;
      f.is_number = true;
      return true;
    }
    if (c == '-' || digit(c)) return number(f);
    return skip_value(0);
  }
  bool skip_value(int depth) {
    if (i_ >= s_.size() || depth > kMaxDepth) return false;
    char c = s_[i_];
    if (c == '"') return skip_string();
    if (c == '{' || c == '[') return skip_container(depth);
    if (c == '-' || digit(c)) {
      RowField ignored;
      return number(ignored);
    }
    return literal("true") || literal("false") || literal("null");
  }
  // An object or array (NaN and Infinity inside one: the full parser).
  bool skip_container(int depth) {
    bool object = s_[i_] == '{';
    char close = object ? '}' : ']';
    ++i_;
    ws();
    if (eat(close)) return true;
    do {
      ws();
      if (object) {
        if (!skip_string()) return false;
        ws();
        if (!eat(':')) return false;
        ws();
      }
      if (!skip_value(depth + 1)) return false;
      ws();
    } while (eat(','));
    return eat(close);
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

bool scan_row(std::string_view line, std::vector<RowField>& fields) {
  if (!Scanner(line).row(fields)) return false;
  std::sort(fields.begin(), fields.end(),
            [](const RowField& a, const RowField& b) { return a.key < b.key; });
  // A repeated key: which one wins is the full parser's rule.
  for (size_t i = 1; i < fields.size(); ++i)
    if (fields[i].key == fields[i - 1].key) return false;
  return true;
}

}  // namespace tune::report
