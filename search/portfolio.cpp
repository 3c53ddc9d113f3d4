// portfolio (portfolio.h): members sharing the history; the schedule that picks who suggests next.
#include "search/portfolio.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace hpctune::search {

namespace {

class Portfolio final : public Searcher {
 public:
  Portfolio(const SearchSpec& spec, PortfolioOptions options, std::vector<std::unique_ptr<Searcher>> members)
      : spec_(spec), opt_(std::move(options)), members_(std::move(members)),
        best_(members_.size(), std::numeric_limits<double>::infinity()), made_(members_.size(), 0) {}

  std::string name() const override { return "portfolio"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    for (std::size_t i = 0; i < n; ++i) {
      const auto [who, turn] = next_member();
      HPCTUNE_ASSIGN(auto got, members_[who]->ask(1));
      if (got.empty()) break;  // a finished finite space (every member shares the issued points)
      Suggestion s = std::move(got.front());
      if (!s.meta.is_object()) s.meta = nlohmann::json::object();
      s.meta["member"] = opt_.members[who].name;
      s.meta["turn"] = turn;
      for (std::size_t m = 0; m < members_.size(); ++m)
        if (m != who) members_[m]->adopt(s);
      record(s);
      out.push_back(std::move(s));
    }
    return out;
  }

  void tell(const Observation& observation) override {
    for (auto& m : members_) m->tell(observation);
    score(observation);
  }

  void tell_report(int64_t seq, int64_t step, double value) override {
    for (auto& m : members_) m->tell_report(seq, step, value);
  }

  bool exhausted() const override {
    return std::any_of(members_.begin(), members_.end(), [](const auto& m) { return m->exhausted(); });
  }

  void restore(const std::vector<Record>& history) override {
    for (auto& m : members_) m->restore(history);
    std::vector<const Record*> ordered;
    for (const auto& r : history) ordered.push_back(&r);
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const Record* a, const Record* b) { return a->suggestion.seq < b->suggestion.seq; });
    for (const Record* r : ordered) record(r->suggestion);
    for (const Record* r : ordered)
      if (r->observation) {
        Observation obs = *r->observation;
        obs.seq = r->suggestion.seq;
        score(obs);
      }
  }

  nlohmann::json state() const override {
    nlohmann::json s = members_.front()->state();
    if (!s.is_object()) s = nlohmann::json::object();
    nlohmann::json members = nlohmann::json::array();
    for (std::size_t m = 0; m < members_.size(); ++m) {
      members.push_back({{"member", opt_.members[m].name},
                         {"algorithm", opt_.members[m].algorithm},
                         {"suggestions", made_[m]},
                         {"best_loss", std::isfinite(best_[m]) ? nlohmann::json(best_[m]) : nlohmann::json()}});
    }
    s["algorithm"] = "portfolio";
    s["members"] = std::move(members);
    if (const auto lead = leader()) s["leader"] = opt_.members[*lead].name;
    return s;
  }

  std::vector<std::string> notes() const override {
    std::string names;
    for (std::size_t m = 0; m < opt_.members.size(); ++m)
      names += (m == 0 ? "" : m + 1 == opt_.members.size() ? " and " : ", ") + opt_.members[m].name;
    std::vector<std::string> out{
        "portfolio of " + names + ", sharing every trial: " + opt_.members.front().name + "'s start-up design of " +
        std::to_string(opt_.design) + " trials, then turns until each made " + std::to_string(opt_.warmup) +
        ", then the one whose suggestions reached the best value makes 2 of every 3"};
    for (auto& line : members_.front()->notes()) out.push_back(std::move(line));
    return out;
  }

  void adopt(const Suggestion& suggestion) override {
    for (auto& m : members_) m->adopt(suggestion);
    record(suggestion);
  }

 private:
  // Who makes the next suggestion, and why ("design", "warmup", "lead", "other").
  std::pair<std::size_t, const char*> next_member() const {
    const auto m = static_cast<int64_t>(members_.size());
    if (issued_ < opt_.design || m == 1) return {0, "design"};
    const int64_t k = issued_ - opt_.design;  // suggestions since the design
    if (k < m * opt_.warmup) return {static_cast<std::size_t>(k % m), "warmup"};
    const std::size_t lead = leader().value_or(0);
    const int64_t j = k - m * opt_.warmup;
    if (j % 3 != 2) return {lead, "lead"};
    // The others in turn.
    const auto other = static_cast<std::size_t>((j / 3) % (m - 1));
    return {other < lead ? other : other + 1, "other"};
  }

  // The member whose own (non-design) suggestions reached the lowest loss; none before any did.
  std::optional<std::size_t> leader() const {
    std::optional<std::size_t> lead;
    for (std::size_t m = 0; m < best_.size(); ++m)
      if (std::isfinite(best_[m]) && (!lead || best_[m] < best_[*lead])) lead = m;
    return lead;
  }

  void record(const Suggestion& s) {
    if (by_seq_.count(s.seq)) return;
    std::size_t who = 0;
    bool design = true;
    if (s.meta.is_object()) {
      const std::string member = s.meta.value("member", std::string());
      for (std::size_t m = 0; m < opt_.members.size(); ++m)
        if (opt_.members[m].name == member) who = m;
      design = s.meta.value("turn", std::string("design")) == "design";
    }
    by_seq_[s.seq] = design ? -1 : static_cast<int64_t>(who);
    if (!design) ++made_[who];
    ++issued_;
  }

  void score(const Observation& obs) {
    // A pruned trial's value (or one short of max_step) is no final value to rank members by.
    if (!is_final(obs, spec_.fidelity) || obs.values.empty() || !std::isfinite(obs.values[0])) return;
    const auto it = by_seq_.find(obs.seq);
    if (it == by_seq_.end() || it->second < 0) return;
    const bool maximize = spec_.objectives.empty() || spec_.objectives.front().maximize;
    const double loss = maximize ? -obs.values[0] : obs.values[0];
    auto& best = best_[static_cast<std::size_t>(it->second)];
    best = std::min(best, loss);
  }

  SearchSpec spec_;
  PortfolioOptions opt_;
  std::vector<std::unique_ptr<Searcher>> members_;
  std::vector<double> best_;    // per member: the lowest loss of its own non-design suggestions
  std::vector<int64_t> made_;   // per member: its non-design suggestions
  std::map<int64_t, int64_t> by_seq_;  // seq -> the member that made it (-1: the design)
  int64_t issued_ = 0;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_portfolio(const SearchSpec& spec, const PortfolioOptions& options) {
  if (options.members.empty()) return err(Errc::kConfig, "portfolio: no member algorithm");
  if (spec.objectives.size() > 1) return err(Errc::kConfig, "portfolio: one objective only (it ranks members by it)");
  std::vector<std::unique_ptr<Searcher>> members;
  for (const auto& m : options.members) {
    SearchSpec member = spec;
    member.algorithm = m.algorithm;
    member.settings = m.settings;
    HPCTUNE_ASSIGN(auto made, make_searcher(member));
    members.push_back(std::move(made));
  }
  return std::unique_ptr<Searcher>(std::make_unique<Portfolio>(spec, options, std::move(members)));
}

}  // namespace hpctune::search
