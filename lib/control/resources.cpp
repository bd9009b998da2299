#include "control/resources.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>

#include "util/strings.hpp"

namespace tune::control {

namespace {
constexpr double kEps = 1e-9;
}

std::string Placement::cuda_visible_devices() const {
  std::string s;
  for (size_t i = 0; i < gpu_ids.size(); ++i) s += (i ? "," : "") + std::to_string(gpu_ids[i]);
  return s;
}

std::optional<Placement> ResourcePool::plan(size_t h, const spec::Resources& req,
                                            const std::set<int>& taken) const {
  const Host& host = hosts_[h];
  if (!host.available || host.cpu_free + kEps < req.cpu) return std::nullopt;
  Placement p{h, req.cpu, req.gpu, {}};
  auto free_of = [&](size_t g) {
    return taken.contains(static_cast<int>(g)) ? 0.0 : host.gpu_free[g];
  };
  if (req.gpu >= 1) {
    auto whole = static_cast<size_t>(req.gpu);
    for (size_t g = 0; g < host.gpu_free.size() && p.gpu_ids.size() < whole; ++g)
      if (free_of(g) >= 1 - kEps) p.gpu_ids.push_back(static_cast<int>(g));
    if (p.gpu_ids.size() < whole) return std::nullopt;
  } else if (req.gpu > 0) {
    // Pack fractions: the fullest GPU that still has room.
    int best = -1;
    for (size_t g = 0; g < host.gpu_free.size(); ++g)
      if (free_of(g) + kEps >= req.gpu &&
          (best < 0 || free_of(g) < free_of(static_cast<size_t>(best))))
        best = static_cast<int>(g);
    if (best < 0) return std::nullopt;
    p.gpu_ids.push_back(best);
  }
  return p;
}

void ResourcePool::take(const Placement& p) {
  Host& host = hosts_[p.host];
  double each = p.gpu >= 1 ? 1.0 : p.gpu;
  for (int g : p.gpu_ids) host.gpu_free[static_cast<size_t>(g)] -= each;
  host.cpu_free -= p.cpu;
}

std::optional<Placement> ResourcePool::acquire(const spec::Resources& req) {
  for (size_t h = 0; h < hosts_.size(); ++h) {
    auto p = hosts_[h].ledger ? acquire_shared(h, req) : plan(h, req, {});
    if (!p) continue;
    if (!hosts_[h].ledger) take(*p);
    return p;
  }
  return std::nullopt;
}

namespace {
double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string holders_text(const std::vector<LedgerEntry>& others) {
  std::string out;
  for (const auto& e : others) {
    if (!e.holds_anything()) continue;
    out += (out.empty() ? "" : "; ") + e.exp_dir + " (pid " + std::to_string(e.pid) + ") holds " +
           util::format_double(e.cpus) + " CPU";
    for (const auto& [g, f] : e.gpus) out += ", GPU " + std::to_string(g);
  }
  return out;
}
}  // namespace

std::optional<Placement> ResourcePool::acquire_shared(size_t h, const spec::Resources& req) {
  Host& host = hosts_[h];
  if (!plan(h, req, {})) return std::nullopt;  // no room of our own: the ledger is not asked
  std::optional<Placement> placed;
  std::string held_by_others;
  host.ledger_stale = false;  // this write says what the host holds now
  auto r = host.ledger->transact([&](const std::vector<LedgerEntry>& others, LedgerEntry& mine) {
    std::set<int> taken;
    double others_cpu = 0;
    size_t sharing = 1;
    bool others_wait = false;
    double now = wall_now();
    for (const auto& e : others) {
      others_cpu += e.cpus;
      for (const auto& [g, f] : e.gpus)
        if (f > kEps) taken.insert(g);
      bool waits = e.waiting_until > now;
      others_wait |= waits;
      if (e.holds_anything() || waits) ++sharing;
    }
    double own = host.cpus - host.cpu_free;
    double limit = std::max(host.machine_cpus, host.cpus);
    bool cpu_ok = req.cpu <= kEps || others_cpu + own + req.cpu <= limit + kEps;
    // Someone waits: grow only up to an equal share (at least one trial).
    if (others_wait && req.cpu > kEps)
      cpu_ok =
          cpu_ok && own + req.cpu <= std::max(req.cpu, limit / static_cast<double>(sharing)) + kEps;
    if (cpu_ok) placed = plan(h, req, taken);
    if (placed) {
      take(*placed);
      mine.waiting_until = 0;
    } else {
      mine.waiting_until = now + 3;  // refreshed by every try while we wait
      held_by_others = holders_text(others);
    }
    mine.cpus = host.cpus - host.cpu_free;
    mine.gpus.clear();
    for (size_t g = 0; g < host.gpu_free.size(); ++g)
      if (host.gpu_free[g] < 1 - kEps) mine.gpus[static_cast<int>(g)] = 1 - host.gpu_free[g];
    return placed.has_value();
  });
  if (!r) {
    spdlog::warn("{}: sharing this machine with other experiments is off", r.error().message);
    host.ledger.reset();
    if (placed) return placed;
    return acquire(req);
  }
  if (!placed && !held_by_others.empty() && wall_now() >= next_wait_log_) {
    spdlog::info("waiting for resources other experiments hold on this machine: {}",
                 held_by_others);
    next_wait_log_ = wall_now() + 600;
  }
  return placed;
}

void ResourcePool::record(size_t h) {
  Host& host = hosts_[h];
  host.ledger_stale = false;
  if (!host.ledger) return;
  auto r = host.ledger->transact([&](const std::vector<LedgerEntry>&, LedgerEntry& mine) {
    mine.cpus = std::max(0.0, host.cpus - host.cpu_free);
    mine.gpus.clear();
    for (size_t g = 0; g < host.gpu_free.size(); ++g)
      if (host.gpu_free[g] < 1 - kEps) mine.gpus[static_cast<int>(g)] = 1 - host.gpu_free[g];
    return true;
  });
  if (!r) {
    spdlog::warn("{}: sharing this machine with other experiments is off", r.error().message);
    host.ledger.reset();
  }
}

std::vector<ResourcePool::Host> local_hosts(const spec::Experiment& exp) {
  std::vector<ResourcePool::Host> hosts;
  for (const auto& h : exp.hosts) {
    if (h.kind != spec::HostSpec::Kind::kLocal) continue;
    ResourcePool::Host host;
    host.name = "local";
    host.cpus = h.cpus.value_or(local_cpu_count());
    host.cpu_free = host.cpus;
    host.gpu_free.assign(static_cast<size_t>(h.gpus.value_or(local_gpu_count())), 1.0);
    host.machine_cpus = local_cpu_count();
    hosts.push_back(std::move(host));
  }
  return hosts;
}

void ResourcePool::set_available(const std::string& name, bool up) {
  for (auto& h : hosts_)
    if (h.name == name) h.available = up;
}

bool ResourcePool::any_available() const {
  for (const auto& h : hosts_)
    if (h.available) return true;
  return false;
}

std::optional<size_t> ResourcePool::find(const std::string& name) const {
  for (size_t i = 0; i < hosts_.size(); ++i)
    if (hosts_[i].name == name) return i;
  return std::nullopt;
}

Placement ResourcePool::acquire_exact(const spec::Resources& req, const std::vector<int>& gpu_ids,
                                      size_t index) {
  Placement p{index, req.cpu, req.gpu, {}};
  if (index >= hosts_.size()) return p;
  Host& host = hosts_[index];
  host.cpu_free -= req.cpu;  // may go below zero: nothing else starts until it is released
  double each = req.gpu >= 1 ? 1.0 : req.gpu;
  for (int g : gpu_ids) {
    auto i = static_cast<size_t>(g);
    if (g < 0 || i >= host.gpu_free.size()) continue;
    host.gpu_free[i] -= each;
    p.gpu_ids.push_back(g);
  }
  record(index);
  return p;
}

void ResourcePool::release(const Placement& p) {
  if (p.host >= hosts_.size()) return;
  Host& host = hosts_[p.host];
  host.cpu_free = std::min(host.cpus, host.cpu_free + p.cpu);
  double each = p.gpu >= 1 ? 1.0 : p.gpu;
  for (int g : p.gpu_ids) {
    auto i = static_cast<size_t>(g);
    if (i < host.gpu_free.size()) host.gpu_free[i] = std::min(1.0, host.gpu_free[i] + each);
  }
  host.ledger_stale = host.ledger != nullptr;
}

void ResourcePool::sync_ledger() {
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (hosts_[h].ledger_stale) record(h);
}

bool ResourcePool::fits_somewhere(const spec::Resources& req) const {
  for (const auto& h : hosts_)
    if (h.cpus + kEps >= req.cpu &&
        static_cast<double>(h.gpu_free.size()) + kEps >= std::ceil(req.gpu))
      return true;
  return false;
}

namespace {
size_t fit_on(const ResourcePool::Host& h, const spec::Resources& req) {
  size_t n = SIZE_MAX;
  if (req.cpu > kEps) n = static_cast<size_t>(std::floor((h.cpus + kEps) / req.cpu));
  if (req.gpu >= 1) {
    n = std::min(n, h.gpu_free.size() / static_cast<size_t>(std::ceil(req.gpu - kEps)));
  } else if (req.gpu > kEps) {
    n = std::min(n, h.gpu_free.size() * static_cast<size_t>(std::floor((1 + kEps) / req.gpu)));
  }
  return n;
}

std::string amount(double v, const char* what) {
  return util::format_double(v) + " " + what + (v == 1 ? "" : "s");
}
}  // namespace

size_t trials_that_fit(const std::vector<ResourcePool::Host>& hosts, const spec::Resources& req) {
  size_t total = 0;
  for (const auto& h : hosts) {
    size_t n = fit_on(h, req);
    total = n == SIZE_MAX || total == SIZE_MAX ? SIZE_MAX : total + n;
  }
  return total;
}

std::string concurrency_note(const std::vector<ResourcePool::Host>& hosts,
                             const spec::Resources& req, std::optional<int> max_concurrent) {
  size_t fit = trials_that_fit(hosts, req);
  if (!max_concurrent || fit >= static_cast<size_t>(*max_concurrent)) return "";
  std::string why;
  for (const auto& h : hosts) {
    why += why.empty() ? "" : "; ";
    why += h.name + " " + amount(h.cpus, "CPU");
    if (req.gpu > 0) why += ", " + amount(static_cast<double>(h.gpu_free.size()), "GPU");
  }
  why += " for " + amount(req.cpu, "CPU");
  if (req.gpu > 0) why += " and " + amount(req.gpu, "GPU");
  why += " per trial";
  return "max_concurrent_trials is " + std::to_string(*max_concurrent) + " but at most " +
         std::to_string(fit) + " trial" + (fit == 1 ? "" : "s") + " fit at once (" + why + ")";
}

int local_cpu_count() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int local_gpu_count() {
  int n = 0;
  std::error_code ec;
  static const std::regex re("nvidia[0-9]+");
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec))
    if (std::regex_match(e.path().filename().string(), re)) ++n;
  return n;
}

}  // namespace tune::control
