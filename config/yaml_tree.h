// The YAML tree of a config: its text read into nodes that keep the line and column of every key
// (read_tree), and the helpers that convert (to_json), search (find_entry, mark_below) and build
// (scalar, map_of) such trees. Internal to hpctune_config: not part of the public API (config.h).
//
// yaml-cpp's YAML::Node keeps duplicate keys silently (lookups see the first, iteration both) and
// does not say whether a scalar was quoted, so the tree is built from the parser's events instead:
// every key keeps its line and column, a duplicate is caught where it occurs, and "10" stays a
// string while 10 is a number. A YAML tag is read only where it restates the core schema's type of
// its value (!!str, !!int, !!float, !!bool, !!null, !!seq, !!map); any other is refused at its place.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hpctune::config {

struct Mark {
  int line = 1;  // 1-based
  int column = 1;
};

struct YEntry;

struct YNode {
  enum class Kind { kNull, kScalar, kSeq, kMap };
  Kind kind = Kind::kNull;
  Mark mark;
  std::string text;     // kScalar
  bool quoted = false;  // quoted, block (| >) or !!str: always a string
  bool str_tag = false; // tagged !!str (quoted is then set too)
  std::vector<YNode> items;
  std::vector<YEntry> entries;
  std::size_t size = 1;  // nodes in this subtree, itself included (keys count as one each)
};

struct YEntry {
  std::string key;
  Mark key_mark;
  YNode value;
};

// What a node is, in a message: "nothing", "a value", "a list", "a map".
const char* kind_text(const YNode& n);

// The config text as a tree: a map at the top level, or the first problem with its file:line:column
// (`source` names the file).
Result<YNode> read_tree(const std::string& text, const std::string& source);

// The text of a YAML file the user names (a config, a machine file), `what` naming it in messages
// ("config", "machine file"): kNotFound when it does not exist; kConfig (the user's to fix) for a
// directory, a device or FIFO (endless, or blocking), a file without read permission, or one of
// more than `max_bytes` (checked before and while reading, in case it grows); kIo when a read
// fails.
Result<std::string> read_yaml_file(const std::string& path, const std::string& what, std::size_t max_bytes);

// The tree as JSON: plain scalars resolved by the YAML 1.2 core schema, quoted ones strings.
nlohmann::json to_json(const YNode& n);

// The entry of `key` in `map`; nullptr when `map` is no map or has no such key.
const YEntry* find_entry(const YNode* map, std::string_view key);

// A plain scalar node, and a map node of `entries` (the trees parse_workflow lays over the file's).
YNode scalar(const std::string& text, Mark mark);
YNode map_of(std::vector<YEntry> entries, Mark mark);

// The mark of the node at `at` below `node` ("[2].params.lr": item 2, key params, key lr), or of
// the deepest node on the way that exists; keys are marked where the key is written.
Mark mark_below(const YNode& node, Mark node_mark, const std::string& at);

}  // namespace hpctune::config
