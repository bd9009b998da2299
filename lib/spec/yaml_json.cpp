#include "spec/yaml_json.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace tune::spec {

namespace {
nlohmann::json plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  const char* ib = (*b == '+') ? b + 1 : b;
  int64_t i = 0;
  if (auto r = std::from_chars(ib, e, i); r.ec == std::errc() && r.ptr == e) return i;
  std::string low;
  for (char c : s) low.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (low == ".inf" || low == "+.inf") return std::numeric_limits<double>::infinity();
  if (low == "-.inf") return -std::numeric_limits<double>::infinity();
  if (low == ".nan") return std::numeric_limits<double>::quiet_NaN();
  // Only decimal forms count as floats ("1e-4", "0.5", ".5"); "inf"/"nan" stay strings.
  bool numeric = !s.empty();
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      numeric = false;
  if (numeric) {
    double d = 0;
    if (auto r = std::from_chars(ib, e, d); r.ec == std::errc() && r.ptr == e) return d;
  }
  return s;
}
}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!") return node.Scalar();  // quoted
      return plain_scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      auto arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      auto obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.Scalar()] = yaml_to_json(kv.second);
      return obj;
    }
  }
  return nullptr;
}

}  // namespace tune::spec
