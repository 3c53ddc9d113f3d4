// The dashboard's web app as embedded in the binary at build time (dashboard/CMakeLists.txt
// generates the table from every file of dashboard/web/src/ plus ECharts): the server answers
// `/` and `/assets/NAME` from here, so the binary needs no file beside it and no network.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpctune::dashboard {

struct Asset {
  std::string_view bytes;    // points into the binary's read-only data: valid for the process' life
  std::string content_type;  // from the name's extension ("text/javascript; charset=utf-8", ...)
};

// The embedded file named `path` relative to web/src/ ("index.html", "app.js", "views/history.js",
// "echarts.min.js"); nullopt for any other name. An exact match in a fixed table: no file system,
// so no `..`, symlink or encoding can reach anything else.
std::optional<Asset> asset(std::string_view path);

// Every embedded name, sorted (tests, and the server's log at start).
std::vector<std::string> asset_names();

// The Content-Type for a file name by its extension; application/octet-stream when unknown.
std::string content_type_for(std::string_view path);

namespace detail {
struct EmbeddedFile {
  const char* name;
  const unsigned char* begin;
  const unsigned char* end;
};
// Defined in the generated web_assets.cpp.
extern const EmbeddedFile kEmbeddedFiles[];
extern const size_t kEmbeddedFileCount;
}  // namespace detail

}  // namespace hpctune::dashboard
