#include "search/random_search.h"

#include <cmath>

#include "search/initial_design.h"
#include "search/searcher_base.h"

namespace hpctune::search {

std::vector<SettingDecl> random_search_settings() {
  return {
      {"init", SettingType::kString, "uniform", -INFINITY, INFINITY, {"uniform", "sobol", "lhs"},
       "how points are drawn: independent uniform draws, a scrambled Sobol sequence, or a Latin "
       "hypercube over the trial budget"},
  };
}

namespace {

class RandomSearch final : public SearcherBase {
 public:
  RandomSearch(const SearchSpec& spec, DesignKind kind, std::string init)
      : SearcherBase(spec),
        init_(std::move(init)),
        design_(space(), kind, spec.seed, spec.max_trials > 0 ? spec.max_trials : 100) {}

  std::string name() const override { return "random"; }

  Result<std::vector<Suggestion>> ask(std::size_t n) override {
    std::vector<Suggestion> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(issue(design_.point(next_seq())));
    return out;
  }

 private:
  void on_tell(const Observation&) override {}
  void add_state(nlohmann::json& s) const override { s["init"] = init_; }

  std::string init_;
  InitialDesign design_;
};

}  // namespace

Result<std::unique_ptr<Searcher>> make_random_search(const SearchSpec& spec) {
  HPCTUNE_ASSIGN(auto settings, resolve_settings("random", random_search_settings(), spec.settings));
  const auto init = settings["init"].get<std::string>();
  DesignKind kind;
  if (!parse_design_kind(init, kind)) return err(Errc::kConfig, "init: unknown design '" + init + "'");
  return std::unique_ptr<Searcher>(std::make_unique<RandomSearch>(spec, kind, init));
}

}  // namespace hpctune::search
