// rl: a reinforcement-learning controller for architecture search (Zoph & Le 2017, "Neural
// Architecture Search with Reinforcement Learning"): every parameter of the space is sampled from a
// learned distribution, and the distributions are trained with REINFORCE and an exponential
// moving-average baseline on the trials' rewards.
//
// The policy. Instead of Zoph & Le's RNN, one softmax per parameter (a table of logits), sampled in
// the space's parents-first order, so that a conditional parameter is sampled, and updated, only in
// the configurations where it is active. The levels of a parameter:
//   choice              one logit per value;
//   int                 one logit per value when it has at most `bins` values, else `bins` equal
//                       bins of its unit range (log-scaled when the parameter is);
//   float               `bins` equal bins of its unit range.
// A binned parameter is drawn as a bin, then uniformly inside the bin. Bins rather than a Gaussian
// with a learned mean: the same softmax for every kind, and a distribution that may keep several
// modes. Fixed parameters take their value. Every logit starts at 0 (uniform policy).
//
// The update. Reward = the objective (negated when minimized); a pruned trial's reward is its
// value; a failed trial gets the worst reward seen so far (nothing when none was seen yet). Rewards
// are normalized (`reward`): rank = the mid-rank of the reward among all rewards so far, scaled to
// [0, 1] (insensitive to the objective's scale and outliers), or standardize = (r - mean) / std over
// all rewards so far. Every `batch` finished trials, the logits take one step (Adam, or plain SGD)
// along the mean over the batch of (normalized reward - baseline) * grad log pi(trial's params),
// plus `entropy` times the gradient of the policy's entropy; then the baseline moves towards each
// reward of the batch: b = decay * b + (1 - decay) * r. The log-prob gradient is the current
// policy's, for the trial's actual parameters (the batch was sampled from older policies while the
// trials ran: the asynchronous variant of the paper's synchronous batches).
//
// Determinism. Suggestion k is drawn from rng_for(k). Batches are formed in seq order: the batch
// [j, j + batch) is applied once every trial of it has finished, whatever the order the results
// arrived in (a slow trial holds back later updates until it finishes). The policy is therefore a
// function of the finished trials and their seqs, and restore() (which replays in seq order)
// reaches the same policy as the uninterrupted run. Warm-start trials train the policy first, in
// the order given.
//
// The defaults (Adam, lr 0.2, entropy 0.03, batch 2, decay 0.9) were chosen on the separable 6 x 5
// categorical problem of tests/test_search_rl.cpp: with them 20 of 20 seeds put > 0.9 probability on
// every parameter's optimum within 300 trials (lr 0.1 or entropy 0.001: 3 to 17 of 20; batch 4: 20
// of 20 too). Batch 2 instead of 4 (issue 25): an update every 2 trials, which on the NAS-like
// cells of bench_search (nas-cell, nas-cell2, hartmann6-cat6; 100/200/400 trials; seeds 0-9 and
// 1000-1009) gave a median regret as low or lower in 16 of 18 cases (nas-cell2 at 200, seeds 0-9:
// 2.08 -> 0; worse: hartmann6-cat6 at 200/400 on seeds 0-9, 0.25 -> 0.48 / 0.29);
// bench/results/search-hartmann-grid.md.
//
// Single objective only: several objectives are refused (kConfig).
//
// state(): "most_likely" (the configuration of the most likely level of every active parameter,
// bins at their centre), "probability" (name -> the probability of that level), "updates".
//
// Settings (SearchSpec::settings):
//   lr              float   0.2      step size on the logits; 0 disables learning
//   optimizer       string  adam     adam | sgd
//   baseline_decay  float   0.9      decay of the moving-average baseline
//   entropy         float   0.03     weight of the entropy bonus
//   batch           int     2        finished trials per policy update
//   bins            int     10       levels of a float, and of an int with more values than this
//   reward          string  rank     rank | standardize
#pragma once

#include <memory>
#include <vector>

#include "search/searcher.h"
#include "search/settings.h"

namespace hpctune::search {

std::vector<SettingDecl> rl_settings();
Result<std::unique_ptr<Searcher>> make_rl(const SearchSpec& spec);

}  // namespace hpctune::search
