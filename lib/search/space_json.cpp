#include "search/space_json.hpp"

#include <cmath>
#include <set>

#include "util/strings.hpp"

namespace tune::search {

namespace {

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : ".") + p;
  return out;
}

void set_at(json& root, const std::vector<std::string>& path, json value) {
  json* at = &root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!at->contains(path[i]) || !(*at)[path[i]].is_object()) (*at)[path[i]] = json::object();
    at = &(*at)[path[i]];
  }
  (*at)[path.back()] = std::move(value);
}

bool is_int(double v) {
  return std::floor(v) == v;
}

// Why `v` is not in domain `d` ("" when it is).
std::string outside(const Domain& d, const json& v) {
  using K = Domain::Kind;
  if (d.kind == K::kChoice || d.kind == K::kGrid) {
    for (const auto& c : d.values)
      if (c == v) return "";
    return "is not one of its values";
  }
  if (!v.is_number() || v.is_boolean()) return "is not a number";
  double x = v.get<double>();
  if (!std::isfinite(x)) return "is not finite";
  const auto& a = d.args;
  double q = a.size() > 2 ? a[2] : 0;
  switch (d.kind) {
    case K::kUniform:
    case K::kLogUniform:
      return x >= a[0] && x <= a[1] ? "" : "is out of its range";
    case K::kQUniform:
    case K::kQLogUniform:  // rounding to q may step just past a bound
      return x >= a[0] - q && x <= a[1] + q ? "" : "is out of its range";
    case K::kRandInt:
    case K::kLogRandInt:
      if (!is_int(x)) return "is not an integer";
      return x >= a[0] && x < a[1] ? "" : "is out of its range [lo, hi)";
    case K::kQRandInt:
    case K::kQLogRandInt:
      if (!is_int(x)) return "is not an integer";
      return x >= a[0] - q && x <= a[1] + q ? "" : "is out of its range";
    default:  // randn, qrandn: any finite number
      return "";
  }
}

// Leaves of `answer` that are neither parameters nor unchanged constants.
Result<void> check_extra(const json& answer, const json& base, const std::set<std::string>& params,
                         const std::string& prefix) {
  for (const auto& [k, v] : answer.items()) {
    std::string path = prefix.empty() ? k : prefix + "." + k;
    if (params.count(path)) continue;
    const json* b = base.is_object() && base.contains(k) ? &base[k] : nullptr;
    if (v.is_object() && (!b || b->is_object())) {
      static const json kEmpty = json::object();
      if (auto r = check_extra(v, b ? *b : kEmpty, params, path); !r) return r;
      continue;
    }
    if (!b) return fail("key '", util::printable(path, 80), "' is not in param_space");
    if (*b != v) return fail("constant '", util::printable(path, 80), "' was changed");
  }
  return {};
}

// The point's value for a parameter: nested ({"a": {"b": 1}}) or dotted ({"a.b": 1}).
const json* point_value(const json& point, const std::string& key) {
  if (auto it = point.find(key); it != point.end()) return &*it;
  return lookup(point, key);
}

}  // namespace

const char* domain_name(Domain::Kind k) {
  static const char* const kNames[] = {"uniform",     "loguniform", "quniform",   "qloguniform",
                                       "randint",     "randn",      "lograndint", "qrandint",
                                       "qlograndint", "qrandn",     "choice",     "grid_search"};
  return kNames[static_cast<int>(k)];
}

json space_to_json(const Space& space) {
  json out = space.base;
  for (const auto& p : space.params) {
    bool listed = p.domain.kind == Domain::Kind::kChoice || p.domain.kind == Domain::Kind::kGrid;
    json args = listed ? p.domain.values : json(p.domain.args);
    set_at(out, p.path, json{{domain_name(p.domain.kind), std::move(args)}});
  }
  return out;
}

Result<TrialConfig> config_from_answer(const Space& space, const json& answer) {
  if (!answer.is_object()) return fail("the config is not an object");
  TrialConfig tc;
  tc.config = space.base;
  std::set<std::string> params;
  for (const auto& p : space.params) {
    std::string key = dotted(p.path);
    params.insert(key);
    const json* v = lookup(answer, key);
    if (!v) return fail("parameter '", util::printable(key, 80), "' is missing");
    if (auto why = outside(p.domain, *v); !why.empty())
      return fail("parameter '", util::printable(key, 80), "' = ",
                  util::printable(v->dump(-1, ' ', false, json::error_handler_t::replace), 60), " ",
                  why, " (", domain_name(p.domain.kind), ")");
    set_at(tc.config, p.path, *v);
    tc.varying.emplace_back(key, *v);
  }
  if (auto r = check_extra(answer, space.base, params, ""); !r) return std::unexpected(r.error());
  return tc;
}

Result<void> check_point(const Space& space, const json& point) {
  if (!point.is_object()) return fail("a point is a mapping of parameters to values");
  std::set<std::string> params;
  for (const auto& p : space.params) {
    std::string key = dotted(p.path);
    params.insert(key);
    const json* v = point_value(point, key);
    if (!v) continue;
    if (auto why = outside(p.domain, *v); !why.empty())
      return fail("parameter '", util::printable(key, 80), "' = ",
                  util::printable(v->dump(-1, ' ', false, json::error_handler_t::replace), 60), " ",
                  why, " (", domain_name(p.domain.kind), ")");
  }
  json nested = json::object();  // dotted keys as nested, for the check of what is extra
  for (const auto& [k, v] : point.items()) {
    std::vector<std::string> path;
    for (size_t at = 0;;) {
      size_t dot = k.find('.', at);
      path.push_back(k.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
      if (dot == std::string::npos) break;
      at = dot + 1;
    }
    set_at(nested, path, v);
  }
  return check_extra(nested, space.base, params, "");
}

TrialConfig fill_point(const Space& space, const json& point, uint64_t seed, uint64_t index) {
  TrialConfig tc = generate(space, seed, index);
  tc.varying.clear();
  for (const auto& p : space.params) {
    std::string key = dotted(p.path);
    const json* v = point_value(point, key);
    json value = v ? *v : *lookup(tc.config, key);
    set_at(tc.config, p.path, value);
    tc.varying.emplace_back(key, std::move(value));
  }
  return tc;
}

}  // namespace tune::search
