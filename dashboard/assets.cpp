// The lookup over the embedded web app (assets.h); the bytes themselves are in the generated
// web_assets.cpp.
#include "dashboard/assets.h"

#include <algorithm>
#include <utility>

namespace hpctune::dashboard {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string content_type_for(std::string_view path) {
  // The types a browser needs to run the app under `X-Content-Type-Options: nosniff`: a script or
  // stylesheet with any other type is refused. Scripts are application/javascript (a JavaScript
  // type as good as text/javascript to a browser; the tests check it).
  static const std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},  {".js", "application/javascript; charset=utf-8"},
      {".mjs", "application/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
      {".json", "application/json; charset=utf-8"}, {".svg", "image/svg+xml"},
      {".png", "image/png"},                  {".ico", "image/x-icon"},
      {".txt", "text/plain; charset=utf-8"},  {".woff2", "font/woff2"},
  };
  for (const auto& [ext, type] : kTypes) {
    if (ends_with(path, ext)) return std::string(type);
  }
  return "application/octet-stream";
}

std::optional<Asset> asset(std::string_view path) {
  for (size_t i = 0; i < detail::kEmbeddedFileCount; ++i) {
    const auto& f = detail::kEmbeddedFiles[i];
    if (path == f.name) {
      return Asset{std::string_view(reinterpret_cast<const char*>(f.begin), static_cast<size_t>(f.end - f.begin)),
                   content_type_for(path)};
    }
  }
  return std::nullopt;
}

std::vector<std::string> asset_names() {
  std::vector<std::string> names;
  for (size_t i = 0; i < detail::kEmbeddedFileCount; ++i) names.emplace_back(detail::kEmbeddedFiles[i].name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace hpctune::dashboard
