// genetic: a generational genetic algorithm in the manner of Cray's HPO, with islands and NSGA-II.
//
// Each island holds a population of `population`. Generation 0 comes from the initial design (or
// the best warm-start trials). Generation g+1 is bred once every member of generation g was
// suggested and at least min_complete_fraction of them finished (completed, pruned or failed;
// 0.75 lets a generation advance without its stragglers, as Project Adam did). Stragglers that
// finish later still join the next breeding pool.
//
// Breeding (one objective): the pool is the finished members of g plus its carried elites; the
// `elitism` best of the pool are carried into g+1 unchanged (not run again), and the rest of g+1
// are children: two parents by tournament (tournament_size, with replacement), crossover with
// probability crossover_rate (uniform: each parameter from either parent; one_point: a prefix from
// one and the rest from the other, in parents-first order), then mutation of each parameter with
// probability mutation_rate (Gaussian step of mutation_sigma in unit space for numbers,
// another value for choices), conditions repaired. A child equal to a parent is mutated again.
// Failed members rank last. So the best finished member is never lost.
//
// Several objectives: NSGA-II (Deb et al. 2002). The survivors of an island are the best
// `population` of (previous survivors + finished members of g) by non-dominated rank, then
// crowding distance; parents are picked from them by tournament on (rank, -crowding); all
// `population` members of g+1 are children.
//
// Islands: every migration_interval generations, island i receives copies of the migration_size
// best trials run so far on island i-1 (a ring) into its breeding pool. Suggestions go round-robin over the islands.
//
// Every suggestion's meta is {"generation": g, "island": i, "parents": [seq, ...]} (parents
// empty in generation 0; warm-start parents have negative seqs); state() lists every generation's
// members, elites and migrants, and each island's survivors. A generation is bred with Rng(derive_seed(seed, (island, g))), so restore()
// rebuilds it exactly when min_complete_fraction is 1.
//
// Settings (SearchSpec::settings):
//   population             int     10       members per island and generation (10 suits
//                                           budgets near 100 trials: about ten generations)
//   generations            int     0        generations to run (0: until the trial budget ends)
//   tournament_size        int     3
//   crossover              string  uniform  uniform | one_point
//   crossover_rate         float   0.9
//   mutation_rate          float   derived  per-parameter probability (default 1 / d)
//   mutation_sigma         float   0.1      Gaussian step for numbers, in unit space
//   elitism                int     1        best members carried unchanged (one objective)
//   islands                int     1
//   migration_interval     int     5        generations between migrations (0: never)
//   migration_size         int     1        migrants per migration
//   min_complete_fraction  float   1.0      in (0, 1]
//   init                   string  lhs      design of generation 0: uniform | sobol | lhs
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> genetic_settings();
Result<std::unique_ptr<Searcher>> make_genetic(const SearchSpec& spec);
// Generation-based: a generation is `population` members on each of `islands` islands, of which
// each generation after the first runs all but its `elitism` elites (one objective; NSGA-II runs
// them all), and waits for every one of them when min_complete_fraction is 1.
std::optional<GenerationSize> genetic_generation_size(const nlohmann::json& settings, std::size_t objectives);

}  // namespace hpctune::search
