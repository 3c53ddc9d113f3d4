// The dashboard's API as a function of a request: which route, which parameters, what comes back
// with which HTTP status. No sockets here (server.h serves it). Every route reads the campaign's
// snapshot (snapshot.h: kept current incrementally, never a full reload per request) and none
// changes anything. The routes, their parameters and JSON shapes are the contract of issue 14
// (README "Dashboard API"):
//
//   GET /api/campaigns                      every served database: name, state, algorithm, trials
//                                           by state, best, elapsed, version, stages (or its error)
//   GET /api/changes?since=V                the change counter and each campaign's version
//   GET /api/campaigns/{i}/status           what `hpctune status --format json` prints
//   GET /api/campaigns/{i}/overview         counts, budget, best, elapsed and ETA, stages, warnings
//   GET /api/campaigns/{i}/trials           a page of trials, filtered and sorted on the server:
//        ?offset=0&limit=100 (1..1000)&sort=trial&order=asc|desc&state=done,failed&stage=NAME
//        &generation=N&q=TEXT&format=json|csv
//        sort: trial seq state attempt created_at started_at finished_at seconds objective rank
//              generation group params.<name> metrics.<name>   (missing values last in either order)
//   GET /api/campaigns/{i}/trials/{id}      what `hpctune trial --format json` prints (?lines=20),
//                                           plus stage, parents and lineage {parents, children}
//   GET /api/campaigns/{i}/history          objective against trial number and time, best so far
//   GET /api/campaigns/{i}/generations      box statistics of the objective per generation
//   GET /api/campaigns/{i}/params           parameters and objective per trial (downsampled)
//   GET /api/campaigns/{i}/importance       PED-ANOVA parameter importance
//   GET /api/campaigns/{i}/curves           intermediate reports per trial
//   GET /api/campaigns/{i}/pareto           the Pareto front of several objectives
//   GET /api/campaigns/{i}/timeline         attempts on trainer groups over time, utilization
//   GET /api/campaigns/{i}/stages           each stage with its result and a view by kind
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::dashboard {

class CampaignSource;

struct ApiResponse {
  ApiResponse() = default;
  ApiResponse(int s, nlohmann::json b) : status(s), body(std::move(b)) {}
  int status = 200;
  nlohmann::json body;        // the JSON answer, unless content_type is set
  std::string content_type;   // "" = JSON (body); otherwise the type of `text` (text/csv)
  std::string text;
  std::vector<std::pair<std::string, std::string>> headers;  // more headers (Content-Disposition)
};

using QueryParams = std::multimap<std::string, std::string>;

// The largest page of trials one request may ask for.
inline constexpr int64_t kMaxPageLimit = 1000;
inline constexpr int64_t kDefaultPageLimit = 100;

// {error: message} with `status`.
ApiResponse api_error(int status, const std::string& message);

class Api {
 public:
  // Serves `databases` (index i of a route is the position in this list). Each database's snapshot
  // is checked for changes at most every `check_every` (0: at every request).
  explicit Api(std::vector<std::string> databases,
               std::chrono::milliseconds check_every = std::chrono::milliseconds(200));
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  // Loads every database's first snapshot (a server's start: each file must hold a campaign, and
  // the first request then finds it loaded). The first error, naming its file.
  Status load();

  // Answers GET `path` with the (already URL-decoded) query `params`. 404 for an unknown route, a
  // bad index or trial, or any path with a `..` segment; 400 naming the parameter for a bad
  // parameter; 500 when a database cannot be read. Safe on any number of threads at once.
  ApiResponse get(const std::string& path, const QueryParams& params);

  // The change counter: bumped whenever a campaign's snapshot changed.
  uint64_t version() const { return counter_.load(); }

 private:
  std::vector<std::unique_ptr<CampaignSource>> sources_;
  std::atomic<uint64_t> counter_{0};
};

// A one-off Api over `databases` (no snapshot kept between calls).
ApiResponse handle_get(const std::vector<std::string>& databases, const std::string& path, const QueryParams& params);

// The files a DB argument names: itself, or every *.db directly inside a directory (sorted by
// name). kUsage when it does not exist or the directory holds none.
Result<std::vector<std::string>> expand_databases(const std::vector<std::string>& args);

// What `hpctune dashboard DB|DIR...` serves: the files named as they are (the server refuses one it
// cannot read), and of each directory's *.db those it can read; a database in a directory that
// another user owns (unless allow_other_owners), that is empty or holds no campaign is skipped
// with the reason. kUsage when nothing is left to serve.
struct ServedDatabases {
  std::vector<std::string> databases;
  std::vector<std::pair<std::string, std::string>> skipped;  // (path, why)
};
Result<ServedDatabases> databases_to_serve(const std::vector<std::string>& args, bool allow_other_owners);

}  // namespace hpctune::dashboard
