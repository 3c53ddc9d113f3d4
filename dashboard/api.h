// The dashboard's API as a pure function of a request: which route, which parameters, what JSON
// comes back with which HTTP status. No sockets here (server.h serves it); every route reads
// through report/ (a read-only CampaignView opened per request) and none changes anything.
//
//   GET /api/campaigns                      every served database: name, state, algorithm, trials
//                                           by state, best, elapsed (or the error opening it)
//   GET /api/campaigns/{i}/status           what `hpctune status --format json` prints
//   GET /api/campaigns/{i}/trials           a page of trials, filtered and sorted on the server:
//        ?offset=0&limit=100 (1..1000)&sort=trial&order=asc|desc&state=done,failed
//        sort: trial seq state attempt created_at started_at finished_at seconds objective rank
//              params.<name> metrics.<name>   (missing values last in either order)
//   GET /api/campaigns/{i}/trials/{id}      what `hpctune trial --format json` prints (?lines=20)
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::dashboard {

struct ApiResponse {
  int status = 200;
  nlohmann::json body;
};

// The largest page of trials one request may ask for.
inline constexpr int64_t kMaxPageLimit = 1000;
inline constexpr int64_t kDefaultPageLimit = 100;

// {error: message} with `status`.
ApiResponse api_error(int status, const std::string& message);

// Answers GET `path` with the (already URL-decoded) query `params` over `databases` (index i of a
// route is the position in this list). 404 for an unknown route, a bad index or trial, or any path
// with a `..` segment; 400 naming the parameter for a bad parameter; 500 when a database cannot
// be read.
ApiResponse handle_get(const std::vector<std::string>& databases, const std::string& path,
                       const std::multimap<std::string, std::string>& params);

// The files a DB argument names: itself, or every *.db directly inside a directory (sorted by
// name). kUsage when it does not exist or the directory holds none.
Result<std::vector<std::string>> expand_databases(const std::vector<std::string>& args);

}  // namespace hpctune::dashboard
