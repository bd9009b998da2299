#include "spec/yaml_guard.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <cstdio>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "util/strings.hpp"

namespace tune::spec {

namespace {

// A problem found at a place in the text.
struct Found {
  YAML::Mark mark;
  std::string message;
};

// Expanded size of a node (aliases counted as copies of what they name).
struct Size {
  uint64_t nodes = 0, bytes = 0, depth = 0;
};

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// Sums the expanded size of the document from its events, and checks its scalars.
class Guard : public YAML::EventHandler {
 public:
  explicit Guard(const YamlLimits& limits) : limits_(limits) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnAnchor(const YAML::Mark&, const std::string& name) override { names_.push_back(name); }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    leaf(mark, anchor, {1, 0, 1});
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string& value) override {
    check_text(mark, value);
    leaf(mark, anchor, {1, value.size(), 1});
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = done_.find(anchor);
    if (it == done_.end())  // named while its own node is still open: it contains itself
      throw Found{mark, "recursive alias '*" + name_of(anchor) +
                            "': the anchored node contains its own alias"};
    add(mark, it->second);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    YAML::anchor_t anchor;
    Size size;  // of the node so far: itself plus its children
  };

  std::string name_of(YAML::anchor_t anchor) const {
    return anchor >= 1 && anchor <= names_.size() ? util::printable(names_[anchor - 1], 40) : "?";
  }

  void check_text(const YAML::Mark& mark, const std::string& value) const {
    if (value.find('\0') != std::string::npos)
      throw Found{mark,
                  "a string holds a NUL byte (\\0), which no argument, path or "
                  "environment value can carry"};
    if (size_t bad = util::invalid_utf8_at(value); bad != std::string::npos) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(value[bad]));
      throw Found{mark, std::string("a string is not valid UTF-8 (byte ") + hex + " at offset " +
                            std::to_string(bad) + " of it)"};
    }
  }

  // Counts `s` into the document and into the open node (as one more child).
  void add(const YAML::Mark& mark, const Size& s) {
    total_.nodes += s.nodes;
    total_.bytes += s.bytes;
    uint64_t depth = stack_.size() + s.depth;
    if (total_.nodes > limits_.max_nodes)
      throw Found{mark, "the document expands to more than " + with_commas(limits_.max_nodes) +
                            " nodes (counting every alias as a copy of what it names)"};
    if (total_.bytes > limits_.max_bytes)
      throw Found{mark, "the document expands to more than " +
                            std::to_string(limits_.max_bytes >> 20) +
                            " MiB of text (counting every alias as a copy of what it names)"};
    if (depth > limits_.max_depth)
      throw Found{mark, "the document nests deeper than " + std::to_string(limits_.max_depth) +
                            " levels (counting every alias as a copy of what it names)"};
    if (!stack_.empty()) {
      Size& top = stack_.back().size;
      top.nodes += s.nodes;
      top.bytes += s.bytes;
      top.depth = std::max(top.depth, s.depth + 1);
    }
  }

  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor, const Size& s) {
    add(mark, s);
    if (anchor != YAML::NullAnchor) done_[anchor] = s;
  }

  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    add(mark, {1, 0, 1});  // the node itself, in its parent
    stack_.push_back({anchor, {1, 0, 1}});
  }

  void close() {
    if (stack_.empty()) return;
    Frame f = stack_.back();
    stack_.pop_back();
    if (f.anchor != YAML::NullAnchor) done_[f.anchor] = f.size;
    if (!stack_.empty()) {  // its children were counted in the document already
      Size& top = stack_.back().size;
      top.nodes += f.size.nodes - 1;  // (the node itself was added when it opened)
      top.bytes += f.size.bytes;
      top.depth = std::max(top.depth, f.size.depth + 1);
    }
  }

  YamlLimits limits_;
  Size total_;
  std::vector<Frame> stack_;
  std::unordered_map<YAML::anchor_t, Size> done_;  // anchored nodes already complete
  std::vector<std::string> names_;                 // anchor names, by anchor id - 1
};

std::string place(const std::string& label, bool located, const YAML::Mark& m) {
  if (!located || m.is_null()) return label;
  return label + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// The line and column of byte `offset` of `text`.
YAML::Mark mark_at(std::string_view text, size_t offset) {
  YAML::Mark m;
  m.pos = static_cast<int>(offset);
  m.line = 0;
  m.column = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n')
      ++m.line, m.column = 0;
    else
      ++m.column;
  }
  return m;
}

}  // namespace

Result<void> check_yaml(std::string_view text, const std::string& label, bool located,
                        const YamlLimits& limits) {
  // The raw text first, so the place named is the offending byte itself.
  if (size_t bad = util::invalid_utf8_at(text); bad != std::string::npos)
    return fail(place(label, located, mark_at(text, bad)), ": not valid UTF-8 text");
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    return fail(place(label, located, mark_at(text, nul)), ": a NUL byte in the text");
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    Guard guard(limits);
    parser.HandleNextDocument(guard);
  } catch (const Found& f) {
    return fail(place(label, located, f.mark), ": ", f.message);
  } catch (const YAML::Exception&) {
    // A syntax error: the real parse reports it, with its own message.
  } catch (const std::exception& e) {
    return fail(label, ": cannot read the YAML: ", e.what());
  }
  return {};
}

}  // namespace tune::spec
