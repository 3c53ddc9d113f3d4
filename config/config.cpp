// The campaign config parser: YAML -> a tree with marks -> checked against the settings table.
#include "config/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <sys/stat.h>

#include "common/endpoint.h"
#include "common/limits.h"
#include "common/shell_template.h"
#include "common/settings.h"
#include "config/pbt_schedule.h"
#include "config/settings.h"
#include "search/auto_search.h"
#include "search/bayesian.h"
#include "search/initial_design.h"
#include "search/grid_search.h"
#include "search/test_functions.h"
#include "trainers/trainer_settings.h"
#include "workflow/stage_settings.h"

namespace hpctune::config {

namespace {

using nlohmann::json;

// --- the YAML tree -------------------------------------------------------------------------------
//
// yaml-cpp's YAML::Node keeps duplicate keys silently (lookups see the first, iteration both) and
// does not say whether a scalar was quoted, so the tree is built from the parser's events instead:
// every key keeps its line and column, a duplicate is caught where it occurs, and "10" stays a
// string while 10 is a number.

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
  std::vector<YNode> items;
  std::vector<YEntry> entries;
  std::size_t size = 1;  // nodes in this subtree, itself included (keys count as one each)
};

struct YEntry {
  std::string key;
  Mark key_mark;
  YNode value;
};

const char* kind_text(const YNode& n) {
  switch (n.kind) {
    case YNode::Kind::kNull: return "nothing";
    case YNode::Kind::kScalar: return "a value";
    case YNode::Kind::kSeq: return "a list";
    case YNode::Kind::kMap: return "a map";
  }
  return "?";
}

Mark to_mark(const YAML::Mark& m) {
  if (m.is_null()) return {};
  return {m.line + 1, m.column + 1};
}

// A problem found while reading: where, the key path, what.
struct Problem {
  Mark mark;
  std::string path;
  std::string what;
};

// The offset of the first byte of `t` that is not part of a valid UTF-8 sequence.
std::optional<std::size_t> invalid_utf8_at(const std::string& t) {
  std::size_t i = 0;
  while (i < t.size()) {
    const auto c = static_cast<unsigned char>(t[i]);
    std::size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) len = 1, cp = c;
    else if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return i;
    if (i + len > t.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(t[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    static const uint32_t kMinOf[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOf[len] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return i;
    i += len;
  }
  return std::nullopt;
}

// The most levels a config may nest (a config needs a handful; every walk of the tree recurses).
constexpr std::size_t kMaxDepth = 64;

// Where flow collections ([ and {) first nest deeper than kMaxDepth, found before yaml-cpp reads
// the text: its scanner buffers every token of an open flow collection, so 16 MB of '[' took
// 3.7 GB before the first event reached the tree builder. Quoted strings and comments are
// skipped; brackets inside plain scalars count too, which only matters past kMaxDepth.
std::optional<std::size_t> flow_too_deep(const std::string& text) {
  std::size_t depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool token_start = i == 0 || std::string_view(" \t\n\r[{,:").find(text[i - 1]) != std::string_view::npos;
    if (c == '#' && token_start) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if ((c == '"' || c == '\'') && token_start) {
      for (++i; i < text.size() && text[i] != c; ++i)
        if (c == '"' && text[i] == '\\') ++i;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// Thrown through yaml-cpp's parser by the tree builder at the first problem it notes.
struct StopReading {};

class TreeBuilder final : public YAML::EventHandler {
 public:
  explicit TreeBuilder(const std::string& text) : text_(text) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents_;
    if (documents_ == 2) note({to_mark(mark), "", "only one YAML document is allowed (remove the '---' or '...')"});
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    count_nodes(1, to_mark(mark));
    YNode n;
    n.mark = to_mark(mark);
    finish(std::move(n), anchor);
  }

  // An alias is a copy of its anchor's subtree: count the nodes it adds before copying, so that
  // aliases of aliases (9 uses on each of 7 levels: 9^7 nodes from 600 bytes) stop at
  // kMaxConfigNodes instead of exhausting memory.
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    YNode n;
    if (it != anchors_.end() && !problem_) {
      if (!count_nodes(it->second.size, to_mark(mark))) {
        finish(std::move(n), 0);
        return;
      }
      n = it->second;
    }
    n.mark = to_mark(mark);
    finish(std::move(n), 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    count_nodes(1, to_mark(mark));
    YNode n;
    n.kind = YNode::Kind::kScalar;
    n.mark = to_mark(mark);
    n.text = value;
    n.quoted = tag == "!" || tag == "tag:yaml.org,2002:str";
    if (tag == "!") check_closed_quote(mark, n);
    check_text(n);
    finish(std::move(n), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(YNode::Kind::kSeq, mark, anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(YNode::Kind::kMap, mark, anchor);
  }
  void OnMapEnd() override {
    apply_merge_keys(stack_.back());
    close();
  }

  // The key path of the node being read ("search.max_trials", "objectives[1]").
  std::string current_path() const {
    std::string path;
    for (const auto& f : stack_) {
      if (!f.segment.empty()) path += (path.empty() || f.segment[0] == '[' ? "" : ".") + f.segment;
    }
    if (!stack_.empty()) {
      const Frame& top = stack_.back();
      if (top.node.kind == YNode::Kind::kMap && top.have_key)
        path += (path.empty() ? "" : ".") + top.key;
      else if (top.node.kind == YNode::Kind::kSeq)
        path += "[" + std::to_string(top.node.items.size()) + "]";
    }
    return path;
  }

  std::optional<YNode>& root() { return root_; }
  const std::optional<Problem>& problem() const { return problem_; }
  int documents() const { return documents_; }

 private:
  struct Frame {
    YNode node;
    YAML::anchor_t anchor = 0;
    std::string segment;  // this node's key in its parent ("search", "[2]")
    bool have_key = false;
    std::string key;
    Mark key_mark;
    bool key_quoted = false;
    std::vector<YEntry> merges;  // `<<` values, applied at the end of the map
    std::unordered_map<std::string, int> key_lines;  // the keys so far, and their lines
  };

  // The first problem ends the reading: nothing after it is built (an alias bomb or a deep
  // nesting stops growing there).
  void note(Problem p) {
    if (!problem_) problem_ = std::move(p);
    throw StopReading{};
  }

  // Adds `n` nodes to the expanded size of the document; false (and the problem noted) beyond
  // kMaxConfigNodes.
  bool count_nodes(std::size_t n, Mark at) {
    nodes_ += n;
    if (nodes_ <= kMaxConfigNodes) return true;
    if (!too_large_) {
      too_large_ = true;
      note({at, current_path(),
            "the config has more than " + std::to_string(kMaxConfigNodes) +
                " YAML nodes, aliases counted at every use (an alias repeated at several levels?)"});
    }
    return false;
  }

  std::string segment_for_child() const {
    if (stack_.empty()) return "";
    const Frame& top = stack_.back();
    if (top.node.kind == YNode::Kind::kMap) return top.have_key ? top.key : "";
    return "[" + std::to_string(top.node.items.size()) + "]";
  }

  void open(YNode::Kind kind, const YAML::Mark& mark, YAML::anchor_t anchor) {
    count_nodes(1, to_mark(mark));
    // Every walk of the tree recurses; a config needs a handful of levels.
    if (stack_.size() == kMaxDepth)
      note({to_mark(mark), "", "nested more than " + std::to_string(kMaxDepth) + " levels deep"});
    Frame f;
    f.node.kind = kind;
    f.node.mark = to_mark(mark);
    f.anchor = anchor;
    f.segment = segment_for_child();
    stack_.push_back(std::move(f));
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    finish(std::move(f.node), f.anchor);
  }

  // A complete node: the document's root, a key, a value or an item.
  void finish(YNode node, YAML::anchor_t anchor) {
    if (anchor != 0) anchors_[anchor] = node;
    if (stack_.empty()) {
      if (!root_) root_ = std::move(node);
      return;
    }
    Frame& top = stack_.back();
    top.node.size += node.size;
    if (top.node.kind == YNode::Kind::kSeq) {
      top.node.items.push_back(std::move(node));
      return;
    }
    if (!top.have_key) {
      if (node.kind != YNode::Kind::kScalar) {
        note({node.mark, current_path(), std::string("a key must be a plain name, not ") + kind_text(node)});
        node.text = "?";
      }
      top.have_key = true;
      top.key = node.text;
      top.key_mark = node.mark;
      top.key_quoted = node.quoted;
      return;
    }
    top.have_key = false;
    YEntry entry{top.key, top.key_mark, std::move(node)};
    if (top.key == "<<" && !top.key_quoted) {
      top.merges.push_back(std::move(entry));
      return;
    }
    // Looked up, not searched: a map of 50,000 keys took seconds.
    if (auto [first, added] = top.key_lines.emplace(entry.key, entry.key_mark.line); !added) {
      std::string path = current_path();
      path += (path.empty() ? "" : ".") + entry.key;
      note({entry.key_mark, path, "duplicate key (first given at line " + std::to_string(first->second) + ")"});
    }
    top.node.entries.push_back(std::move(entry));
  }

  // `<<: *base` (or a list of them): the base's keys that the map does not set itself.
  void apply_merge_keys(Frame& f) {
    for (auto& merge : f.merges) {
      std::vector<const YNode*> sources;
      if (merge.value.kind == YNode::Kind::kSeq)
        for (const auto& item : merge.value.items) sources.push_back(&item);
      else sources.push_back(&merge.value);  // a map; anything else is refused below
      for (const YNode* source : sources) {
        if (source->kind != YNode::Kind::kMap) {
          note({merge.key_mark, current_path(), "'<<' merges maps only, got " + std::string(kind_text(*source))});
          return;
        }
        for (const auto& e : source->entries) {
          if (!f.key_lines.emplace(e.key, e.key_mark.line).second) continue;  // the map's own (or an earlier merge's)
          // A merged entry is a copy too: counted like an alias.
          if (!count_nodes(e.value.size + 1, merge.key_mark)) return;
          f.node.size += e.value.size + 1;
          f.node.entries.push_back(e);
        }
      }
    }
    f.merges.clear();
  }

  // Every value ends up in JSON (the store, the assign messages) and in command lines and file
  // names: text that is not UTF-8 cannot be written as JSON, and a NUL cuts a C string short.
  void check_text(const YNode& n) {
    const std::string& t = n.text;
    if (t.find('\0') != std::string::npos) {
      note({n.mark, current_path(), "a value may not contain a NUL character"});
      return;
    }
    if (auto bad = invalid_utf8_at(t))
      note({n.mark, current_path(),
            "the text is not valid UTF-8 (byte " + std::to_string(*bad + 1) + " of the value); save the file as UTF-8"});
  }

  // yaml-cpp 0.7 takes a quoted scalar that is never closed up to the end of the file, swallowing
  // every key after it. Catch that here: the opening quote is at mark.pos.
  void check_closed_quote(const YAML::Mark& mark, const YNode& n) {
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return;
    const char q = text_[static_cast<std::size_t>(mark.pos)];
    if (q != '"' && q != '\'') return;
    for (std::size_t i = static_cast<std::size_t>(mark.pos) + 1; i < text_.size(); ++i) {
      if (q == '"' && text_[i] == '\\') {
        ++i;
        continue;
      }
      if (text_[i] == q) {
        if (q == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;
          continue;
        }
        return;
      }
    }
    note({n.mark, current_path(), std::string("YAML syntax error: the quoted string is never closed (a ") + q +
                                      " is missing)"});
  }

  const std::string& text_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, YNode> anchors_;
  std::optional<YNode> root_;
  std::optional<Problem> problem_;
  int documents_ = 0;
  std::size_t nodes_ = 0;
  bool too_large_ = false;
};

// yaml-cpp's terse messages, with what usually causes them.
std::string explain_syntax_error(const std::string& message) {
  static const std::vector<std::pair<std::string, std::string>> hints = {
      {"illegal map value", "a ':' where a value was expected; check the indentation, or quote a value that "
                            "contains ': '"},
      {"end of map not found", "check the indentation"},
      {"illegal tab when looking for indentation", "indent with spaces, not tabs"},
      {"end of sequence flow not found", "a ']' is missing"},
      {"end of map flow not found", "a '}' is missing"},
      {"unknown token", "quote a value that starts with @ or `"},
      {"block sequence entries are not allowed in this context", "check the indentation of the '-'"},
  };
  for (const auto& [text, hint] : hints)
    if (message == text) return message + " (" + hint + ")";
  return message;
}

// --- from the tree to JSON -----------------------------------------------------------------------

json to_json(const YNode& n) {
  switch (n.kind) {
    case YNode::Kind::kNull: return nullptr;
    case YNode::Kind::kScalar: return n.quoted ? json(n.text) : resolve_plain_scalar(n.text);
    case YNode::Kind::kSeq: {
      json out = json::array();
      for (const auto& item : n.items) out.push_back(to_json(item));
      return out;
    }
    case YNode::Kind::kMap: {
      json out = json::object();
      for (const auto& e : n.entries) out[e.key] = to_json(e.value);
      return out;
    }
  }
  return nullptr;
}

const YEntry* find_entry(const YNode* map, std::string_view key) {
  if (map == nullptr || map->kind != YNode::Kind::kMap) return nullptr;
  for (const auto& e : map->entries)
    if (e.key == key) return &e;
  return nullptr;
}

// "Number of trials to run: the campaign's budget." -> "number of trials to run: the campaign's budget"
std::string first_sentence(const std::string& help) {
  std::size_t end = 0;
  while ((end = help.find(". ", end)) != std::string::npos) {
    if (end + 2 < help.size() && std::isupper(static_cast<unsigned char>(help[end + 2]))) break;
    end += 2;
  }
  std::string s = help.substr(0, end);
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s.size() > 1 && std::isupper(static_cast<unsigned char>(s[0])) && !std::isupper(static_cast<unsigned char>(s[1])))
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

// "trainer.kind" -> "trainer kind", "space.*.type" -> "space type".
std::string selector_label(const std::string& selector) {
  std::string out;
  std::size_t start = 0;
  while (start <= selector.size()) {
    auto end = selector.find('.', start);
    if (end == std::string::npos) end = selector.size();
    std::string segment = selector.substr(start, end - start);
    if (segment.size() > 2 && segment.compare(segment.size() - 2, 2, "[]") == 0) segment.resize(segment.size() - 2);
    if (segment != "*" && !segment.empty()) out += (out.empty() ? "" : " ") + segment;
    start = end + 1;
  }
  return out;
}

// A value in a message: strings in single quotes, the rest as YAML.
std::string quoted_value(const json& v) {
  return v.is_string() ? "'" + v.get<std::string>() + "'" : to_yaml_flow(v);
}

// The first line up to `line` (1-based) whose indentation has a tab: yaml-cpp reports those as
// whatever they break ("illegal map value"), rarely as the tab itself.
std::optional<Mark> tab_in_indentation(const std::string& text, int line) {
  int current = 1;
  std::size_t start = 0;
  while (start < text.size() && current <= line) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    for (std::size_t i = start; i < end && (text[i] == ' ' || text[i] == '\t'); ++i)
      if (text[i] == '\t') return Mark{current, static_cast<int>(i - start) + 1};
    start = end + 1;
    ++current;
  }
  return std::nullopt;
}

// [-+]digits: an integer as written, whatever its size.
bool is_integer_literal(const std::string& text) {
  std::size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return i < text.size() && std::all_of(text.begin() + static_cast<std::ptrdiff_t>(i), text.end(),
                                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

// 2^53: every integer up to it is exactly a double.
constexpr double kMaxExactInt = 9007199254740992.0;

bool is_numeric_type(Type t) { return t == Type::kInt || t == Type::kNumber || t == Type::kDuration; }

// --- the walk ------------------------------------------------------------------------------------

class Walker {
 public:
  explicit Walker(std::string source, std::function<std::string(const std::string&)> rename = nullptr)
      : source_(std::move(source)), rename_(std::move(rename)) {}

  // `rename` maps a key path to the one the user sees: a stage's own keys are walked as the top
  // level's ("search.max_trials") and named as written ("stages[1].search.max_trials").
  Error fail(Mark mark, const std::string& path, const std::string& what) const {
    std::string message = source_ + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column) + ": ";
    if (!path.empty()) message += (rename_ ? rename_(path) : path) + ": ";
    return err(Errc::kConfig, message + what);
  }

  // The mark of the key at `path`, or of the closest enclosing key that was given.
  Mark mark_of(std::string path) const {
    while (true) {
      auto it = marks_.find(path);
      if (it != marks_.end()) return it->second;
      const auto cut = path.find_last_of(".[");
      if (cut == std::string::npos || cut == 0) return Mark{};
      path.resize(cut);
    }
  }
  bool given(const std::string& path) const { return marks_.count(path) != 0; }
  // The value at `path` as written in the file (a plain scalar), else `otherwise`.
  std::string text_of(const std::string& path, std::string otherwise) const {
    auto it = texts_.find(path);
    return it != texts_.end() ? it->second : otherwise;
  }

  // Walks a section (a map of declared keys) into `out`. `pattern` is its table path ("" for the
  // top level, "space.*"), `path` its concrete path ("space.lr"), `where` the mark of its key
  // (where a missing key is reported).
  Status section(const YNode* node, const std::string& pattern, const std::string& path, Mark where, json& out,
                 const Setting* decl) {
    // A bare name stands for the section's kind: `early_stopping: asha` is {kind: asha}.
    YNode bare;
    if (node != nullptr && node->kind == YNode::Kind::kScalar && !find_settings(child_of(pattern, "kind")).empty()) {
      bare.kind = YNode::Kind::kMap;
      bare.mark = node->mark;
      bare.entries.push_back({"kind", node->mark, *node});
      node = &bare;
    }
    if (node != nullptr && node->kind != YNode::Kind::kMap && node->kind != YNode::Kind::kNull)
      return fail(where, path, "expected a map of settings, got " + shown(*node));
    out = json::object();
    frames_.push_back({pattern, &out});
    Status status = section_body(node, pattern, path, where, out, decl);
    frames_.pop_back();
    return status;
  }

  Status space(const YNode& node, const std::string& path, Mark where, json& out) {
    out = json::object();
    if (node.kind == YNode::Kind::kNull) return Status::Ok();
    if (node.kind != YNode::Kind::kMap)
      return fail(where, path, "expected a map of parameter name -> spec, got " + shown(node));
    for (const auto& e : node.entries) {
      const std::string param_path = path + "." + e.key;
      marks_[param_path] = e.key_mark;
      space_order_.push_back(e.key);
      if (!valid_param_name(e.key))
        return fail(e.key_mark, param_path,
                    "a parameter name must start with a letter or '_' and contain only letters, digits, '_' and '-'");
      if (e.value.kind == YNode::Kind::kMap) {
        if (find_entry(&e.value, "type") == nullptr) {
          return fail(e.key_mark, param_path,
                      "a parameter spec needs a type: float, int, choice or fixed (to fix a map value, write "
                      "{type: fixed, value: {...}})");
        }
        HPCTUNE_TRY(section(&e.value, "space.*", param_path, e.key_mark, out[e.key], nullptr));
      } else {
        // A plain value or list: the parameter is fixed.
        marks_[param_path + ".value"] = e.value.kind == YNode::Kind::kNull ? e.key_mark : e.value.mark;
        out[e.key] = json{{"type", "fixed"}, {"value", to_json(e.value)}};
      }
    }
    return Status::Ok();
  }

  const std::vector<std::string>& space_order() const { return space_order_; }

 private:
  struct Frame {
    std::string pattern;
    json* out;
  };

  static std::string child_of(const std::string& pattern, const std::string& key) {
    return pattern.empty() ? key : pattern + "." + key;
  }

  static std::string shown(const YNode& n) {
    if (n.kind == YNode::Kind::kScalar) return n.quoted ? "\"" + n.text + "\"" : "'" + n.text + "'";
    return kind_text(n);
  }

  static bool valid_param_name(const std::string& name) {
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
    return std::all_of(name.begin(), name.end(),
                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
  }

  // The value of the selector `selector_pattern` ("trainer.kind", "space.*.type") in the walk so far.
  std::optional<std::string> selector_value(const std::string& selector_pattern) const {
    const auto dot = selector_pattern.rfind('.');
    const std::string section = dot == std::string::npos ? "" : selector_pattern.substr(0, dot);
    const std::string key = dot == std::string::npos ? selector_pattern : selector_pattern.substr(dot + 1);
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      if (it->pattern != section) continue;
      auto v = it->out->find(key);
      if (v != it->out->end() && v->is_string()) return v->get<std::string>();
      return std::nullopt;
    }
    return std::nullopt;
  }

  bool active(const Setting& s) const {
    if (s.scope.always()) return true;
    const auto value = selector_value(s.scope.key);
    return value && s.scope.contains(*value);
  }

  const Setting* active_of(const std::vector<const Setting*>& decls) const {
    for (const auto* d : decls)
      if (active(*d)) return d;
    return nullptr;
  }

  // Is `leaf` of section `pattern` a selector of some scope?
  static bool is_selector(const std::string& pattern, std::string_view leaf) {
    const std::string full = pattern.empty() ? std::string(leaf) : pattern + "." + std::string(leaf);
    for (const auto& s : settings())
      if (s.scope.key == full || s.closed_when.key == full) return true;
    return false;
  }

  Status section_body(const YNode* node, const std::string& pattern, const std::string& path, Mark where, json& out,
                      const Setting* decl) {
    const auto kids = children(pattern);
    std::vector<const YEntry*> entries;
    if (node != nullptr)
      for (const auto& e : node->entries) entries.push_back(&e);
    std::vector<bool> done(entries.size(), false);
    auto child_path = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };

    // Selectors first, given or defaulted: the keys that decide which other keys exist. A
    // missing one is reported before the keys that depend on it.
    for (const auto* kid : kids) {
      const std::string key(leaf_name(kid->path));
      if (!is_selector(pattern, key) || out.contains(key) || !active(*kid)) continue;
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (entries[i]->key != key || done[i]) continue;
        done[i] = true;
        HPCTUNE_TRY(value(*kid, entries[i]->value, child_path(key), entries[i]->key_mark, out[key]));
      }
      if (out.contains(key)) continue;
      if (kid->required) return missing(*kid, child_path(key), where);
      if (!kid->default_value.is_null()) HPCTUNE_TRY(fill_default(*kid, child_path(key), where, out[key]));
    }

    const bool open =
        decl != nullptr && decl->open && !(!decl->closed_when.always() && active_scope(decl->closed_when));
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (done[i]) continue;
      const YEntry& e = *entries[i];
      std::vector<const Setting*> decls;
      for (const auto* kid : kids)
        if (leaf_name(kid->path) == e.key) decls.push_back(kid);
      if (decls.empty()) {
        if (open) {
          marks_[child_path(e.key)] = e.key_mark;
          out[e.key] = to_json(e.value);
          continue;
        }
        return unknown_key(e, pattern, child_path(e.key), kids);
      }
      const Setting* s = active_of(decls);
      if (s == nullptr) return out_of_scope(e, child_path(e.key), decls);
      HPCTUNE_TRY(value(*s, e.value, child_path(e.key), e.key_mark, out[e.key]));
    }

    // What was not given: required keys, defaults.
    for (const auto* kid : kids) {
      const std::string key(leaf_name(kid->path));
      if (out.contains(key) || !active(*kid)) continue;
      if (kid->required) return missing(*kid, child_path(key), where);
      if (!kid->default_value.is_null()) HPCTUNE_TRY(fill_default(*kid, child_path(key), where, out[key]));
    }
    return Status::Ok();
  }

  Status fill_default(const Setting& s, const std::string& path, Mark where, json& out) {
    switch (s.type) {
      case Type::kSection: return section(nullptr, s.path, path, where, out, &s);
      case Type::kList:
      case Type::kSpace: out = s.default_value; return Status::Ok();
      case Type::kValueList:
        // An empty default (resources.slurm.setup: no lines) is a default, not a value the user
        // gave: the "non-empty" rule is for what a config writes.
        if (s.default_value.is_array() && s.default_value.empty()) {
          out = s.default_value;
          return Status::Ok();
        }
        [[fallthrough]];
      default: {
        auto normalized = check_value(s, s.default_value);
        if (!normalized.ok())
          return err(Errc::kInternal, "the default of " + s.path + " is invalid: " + normalized.error().message());
        out = std::move(normalized).value();
        return Status::Ok();
      }
    }
  }

  Status missing(const Setting& s, const std::string& path, Mark where) const {
    const std::string what = s.type == Type::kEnum ? "one of " + join(s.choices, ", ") : first_sentence(s.help);
    return fail(where, path, "missing required key (" + what + ")");
  }

  bool active_scope(const Scope& scope) const {
    const auto value = selector_value(scope.key);
    return value && scope.contains(*value);
  }

  Status unknown_key(const YEntry& e, const std::string& pattern, const std::string& path,
                     const std::vector<const Setting*>& kids) const {
    std::vector<const Setting*> valid;
    std::vector<std::string> names;
    for (const auto* kid : kids) {
      if (!active(*kid)) continue;
      valid.push_back(kid);
      const std::string name(leaf_name(kid->path));
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    if (auto near = did_you_mean(e.key, candidates_of(valid)))
      return fail(e.key_mark, path, "unknown key; did you mean '" + *near + "'?");
    // The right name in the wrong place ("max_trials" at the top level)?
    for (const auto& s : settings()) {
      if (s.path.find('*') != std::string::npos || s.path.find("[]") != std::string::npos) continue;
      if (leaf_name(s.path) == e.key && s.path != pattern + "." + e.key)
        return fail(e.key_mark, path, "unknown key; did you mean '" + s.path + "'?");
    }
    if (names.empty()) return fail(e.key_mark, path, "unknown key (nothing can be set here)");
    return fail(e.key_mark, path, "unknown key (expected one of " + join(names, ", ") + ")");
  }

  Status out_of_scope(const YEntry& e, const std::string& path, const std::vector<const Setting*>& decls) const {
    const Scope& scope = decls.front()->scope;
    const std::string label = selector_label(scope.key);
    const auto current = selector_value(scope.key);
    std::vector<std::string> owners;
    for (const auto* d : decls)
      for (const auto& v : d->scope.values)
        if (std::find(owners.begin(), owners.end(), "'" + v + "'") == owners.end()) owners.push_back("'" + v + "'");
    const std::string current_text = current ? "'" + *current + "'" : "(not set)";
    return fail(e.key_mark, path, "unknown key for " + label + " " + current_text + " (it is for " + label + " " +
                                      join(owners, ", ") + ")");
  }

  // One value of a declared key.
  Status value(const Setting& s, const YNode& node, const std::string& path, Mark key_mark, json& out) {
    marks_[path] = key_mark;
    switch (s.type) {
      case Type::kSection:
        return section(&node, s.path, path, key_mark, out, &s);
      case Type::kSpace:
        return space(node, path, key_mark, out);
      case Type::kList: {
        if (node.kind != YNode::Kind::kSeq)
          return fail(key_mark, path, "expected " + describe_type(s) + ", got " + shown(node));
        if (node.items.empty()) return fail(key_mark, path, "the list is empty; give at least one item");
        out = json::array();
        for (std::size_t i = 0; i < node.items.size(); ++i) {
          const std::string item_path = path + "[" + std::to_string(i) + "]";
          marks_[item_path] = node.items[i].mark;
          json item;
          HPCTUNE_TRY(section(&node.items[i], s.path + "[]", item_path, node.items[i].mark, item, nullptr));
          out.push_back(std::move(item));
        }
        return Status::Ok();
      }
      default: break;
    }
    if (node.kind == YNode::Kind::kNull)
      return fail(key_mark, path, "no value given; expected " + describe_type(s));

    // Items of a list are checked one by one, so that an error points at its item.
    if ((s.type == Type::kIntList || s.type == Type::kValueList) && node.kind == YNode::Kind::kSeq) {
      if (node.items.empty()) return leaf(s, node, path, key_mark, out);
      out = json::array();
      for (std::size_t i = 0; i < node.items.size(); ++i) {
        const YNode& item = node.items[i];
        const std::string item_path = path + "[" + std::to_string(i) + "]";
        marks_[item_path] = item.mark;
        if (s.type == Type::kValueList) {
          out.push_back(to_json(item));
          continue;
        }
        if (item.kind != YNode::Kind::kScalar)
          return fail(item.mark, item_path, std::string("expected an integer, got ") + kind_text(item));
        json one;
        HPCTUNE_TRY(leaf(s, item, item_path, item.mark, one));
        out.push_back(std::move(one));
      }
      return Status::Ok();
    }
    if (s.type == Type::kStringMap && node.kind == YNode::Kind::kMap) {
      out = json::object();
      for (const auto& e : node.entries) {
        marks_[path + "." + e.key] = e.key_mark;
        if (const std::string problem = string_map_name_problem(e.key); !problem.empty())
          return fail(e.key_mark, path + "." + e.key, problem);
        if (e.value.kind != YNode::Kind::kScalar)
          return fail(e.key_mark, path + "." + e.key, "expected a string, got " + shown(e.value));
        out[e.key] = e.value.text;
      }
      return Status::Ok();
    }
    if (s.type == Type::kCondition && node.kind == YNode::Kind::kMap) {
      if (node.entries.size() != 1)
        return fail(key_mark, path,
                    "a condition names one parameter: {parent: value} or {parent: [values]}, got " +
                        std::to_string(node.entries.size()));
      const YEntry& e = node.entries.front();
      marks_[path + "." + e.key] = e.key_mark;
      if (e.value.kind == YNode::Kind::kSeq)
        for (std::size_t i = 0; i < e.value.items.size(); ++i)
          marks_[path + "." + e.key + "[" + std::to_string(i) + "]"] = e.value.items[i].mark;
    }
    return leaf(s, node, path, key_mark, out);
  }

  Status leaf(const Setting& s, const YNode& node, const std::string& path, Mark mark, json& out) {
    json given;
    const bool textual = s.type == Type::kString || s.type == Type::kEnum;
    if (textual && node.kind == YNode::Kind::kScalar) given = node.text;  // name: 2024 is a name
    else given = to_json(node);
    auto checked = check_value(s, given);
    if (!checked.ok() && (s.type == Type::kInt || s.type == Type::kIntList) && node.kind == YNode::Kind::kScalar &&
        !node.quoted && is_integer_literal(node.text) && given.is_number_float()) {
      // A whole number past 64 bits was read as a double: say so with the number as written.
      const std::string limit = s.max ? format_number(*s.max) : std::to_string(std::numeric_limits<int64_t>::max());
      const std::string lowest = s.min ? format_number(*s.min) : std::to_string(std::numeric_limits<int64_t>::min());
      return fail(mark, path,
                  node.text + (node.text[0] == '-' ? " is below the minimum " + lowest : " is above the maximum " + limit));
    }
    if (!checked.ok()) {
      std::string what = checked.error().message();
      if (node.kind == YNode::Kind::kScalar && node.quoted && (is_numeric_type(s.type) || s.type == Type::kBool ||
                                                               s.type == Type::kIntList)) {
        const json plain = resolve_plain_scalar(node.text);
        if (!plain.is_string() && !plain.is_null()) what += " (it is quoted, so it is a string; remove the quotes)";
      }
      return fail(mark, path, what);
    }
    if (s.type == Type::kString && s.required && checked.value().get<std::string>().empty())
      return fail(mark, path, "must not be empty");
    if (node.kind == YNode::Kind::kScalar && !node.quoted && is_numeric_type(s.type)) texts_[path] = node.text;
    out = std::move(checked).value();
    return Status::Ok();
  }

  std::string source_;
  std::vector<Frame> frames_;
  std::function<std::string(const std::string&)> rename_;
  std::map<std::string, Mark> marks_;
  std::map<std::string, std::string> texts_;
  std::vector<std::string> space_order_;
};

// --- checks across keys, and the CampaignConfig --------------------------------------------------

// The setting of trainer `kind` that a parameter `name` sets (a space's, a pbt schedule's); nullptr
// when there is none, with what to say in `*what` ("not a setting of trainer 'mlp'; did you mean
// 'lr'?"). Names a command or function trainer takes freely (free_space_name) are the caller's.
const Setting* trainer_setting_of(const std::string& kind, const std::string& name, std::string* what) {
  std::vector<const Setting*> kind_settings;
  for (const auto* s : children("trainer")) {
    if (s->path == "trainer.kind" || !s->scope.contains(kind)) continue;
    kind_settings.push_back(s);
    if (leaf_name(s->path) == name) return s;
  }
  *what = "not a setting of trainer '" + kind + "'";
  if (auto near = did_you_mean(name, candidates_of(kind_settings))) {
    *what += "; did you mean '" + *near + "'?";
  } else {
    std::vector<std::string> names;
    for (const auto* s : kind_settings) names.emplace_back(leaf_name(s->path));
    const auto* can = trainers::trainer_capabilities(kind);
    if (can != nullptr && can->params_hint != nullptr) names.push_back(can->params_hint);
    *what += " (its settings: " + join(names, ", ") + ")";
  }
  return nullptr;
}

// The kinds of the catalog that write `what` (predictions or checkpoints): "mlp and cnn".
std::string writers_of(std::string_view what) {
  std::vector<std::string> kinds;
  for (const auto& k : trainers::trainer_catalog()) {
    const auto& out = what == trainers::kProvidesPredictions ? k.can.predictions : k.can.checkpoints;
    if (out.written) kinds.push_back(k.kind);
  }
  if (kinds.empty()) return "none";
  std::string last = kinds.back();
  kinds.pop_back();
  return kinds.empty() ? last : join(kinds, ", ") + " and " + last;
}

// Why the trainer of stage `input` does not give a `consumer` stage the `what` it needs
// (trainers::kProvidesPredictions or kProvidesCheckpoints), naming the key that says so; nullopt
// when it does. A kind with a provides_setting (command) declares it there: an ensemble reads the
// program's prediction files and a transfer its checkpoint directory; a pbt stage cannot use a
// program's checkpoints yet, so a declaration is refused there, saying so.
std::optional<std::string> trainer_lacks(const std::string& consumer, const std::string& input, const json& trainer,
                                         const char* what) {
  const std::string kind = trainer.value("kind", "");
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr) return std::nullopt;  // the walker refused the kind
  const std::string of = "trainer kind '" + kind + "' of stage '" + input + "'";
  const std::string needs = "the " + consumer + " needs " + what + ", and ";
  if (can->provides_setting != nullptr) {
    const std::string key = std::string("trainer.") + can->provides_setting;
    bool declared = false;
    const json none = json::array();
    const json& list = trainer.contains(can->provides_setting) ? trainer[can->provides_setting] : none;
    for (const auto& v : list) declared = declared || v == what;
    if (!declared) return needs + of + " provides none (" + key + ")";
    // An ensemble reads the program's prediction files, a transfer its checkpoint directory.
    if (consumer != "pbt") return std::nullopt;
    return std::string(what) + " declared by " + of + " (" + key + "): not supported yet for stages of kind " +
           consumer + ", which read only those of " + writers_of(what);
  }
  const trainers::TrainerOutput& out = std::string_view(what) == trainers::kProvidesPredictions ? can->predictions
                                                                                               : can->checkpoints;
  if (!out.written) return needs + of + " writes none (" + writers_of(what) + " do)";
  if (out.switch_setting != nullptr && trainer.contains(out.switch_setting) && trainer[out.switch_setting].is_boolean() &&
      !trainer[out.switch_setting].get<bool>())
    return needs + "stage '" + input + "' turns them off (its trainer." + out.switch_setting + " is false)";
  if (consumer == "pbt" && can->step_setting == nullptr)
    return needs + "a step setting to train each interval to, and " + of + " has none";
  return std::nullopt;
}

// Why the predictions of stage `input`'s trainer cannot serve the `task` a consumer stage asks for
// (an ensemble's classification or regression), when the trainer kind declares the task its
// prediction files serve; nullopt when they can or nothing is declared.
std::optional<std::string> task_mismatch(const StageConfig& consumer, const std::string& input, const json& trainer,
                                         const char* needs) {
  if (std::string_view(needs) != trainers::kProvidesPredictions || !consumer.settings.contains("task") ||
      !consumer.settings["task"].is_string())
    return std::nullopt;
  const std::string task = consumer.settings["task"].get<std::string>();
  const std::string kind = trainer.value("kind", "");
  const auto* can = trainers::trainer_capabilities(kind);
  if (can == nullptr || can->predictions.task == nullptr || task == can->predictions.task) return std::nullopt;
  return "the " + consumer.kind + " is a " + task + " ensemble, and trainer kind '" + kind + "' of stage '" + input +
         "' writes " + can->predictions.task + " predictions";
}

// A list of class labels (trainer.classes, a transfer stage's classes): [] or at least two distinct
// ones, as the classifier trainers take them (trainers::classes_problem). `path` names the list.
std::optional<std::pair<std::string, std::string>> classes_problem_at(const json& classes, const std::string& path) {
  if (!classes.is_array()) return std::nullopt;  // a single integer is one class: the trainer's own message
  std::vector<int64_t> labels;
  for (const auto& c : classes) {
    if (!c.is_number_integer()) return std::nullopt;  // the table refused it already
    labels.push_back(c.get<int64_t>());
  }
  auto problem = trainers::classes_problem(labels);
  if (!problem) return std::nullopt;
  return std::make_pair(path + "[" + std::to_string(problem->index) + "]", "must be " + problem->must_be);
}

class Builder {
 public:
  Builder(Walker& walker, json& root) : w_(walker), root_(root) {}

  Status check_name() {
    const auto& name = root_["name"].get_ref<const std::string&>();
    for (unsigned char c : name)
      if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-'))
        return w_.fail(w_.mark_of("name"), "name",
                       "'" + name + "' may contain only letters, digits, '.', '_' and '-' (it names files)");
    return Status::Ok();
  }

  Status check_objectives(CampaignConfig& c) {
    const bool one = root_.contains("objective"), many = root_.contains("objectives");
    if (one && many) {
      const Mark a = w_.mark_of("objective"), b = w_.mark_of("objectives");
      const bool later_many = b.line > a.line || (b.line == a.line && b.column > a.column);
      return w_.fail(later_many ? b : a, later_many ? "objectives" : "objective",
                     "give either objective or objectives, not both");
    }
    if (!one && !many)
      return w_.fail(Mark{}, "objective",
                     "missing required key (give objective: {metric: ..., mode: max} or objectives: a list of them)");
    json list = one ? json::array({root_["objective"]}) : root_["objectives"];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string metric = list[i]["metric"].get<std::string>();
      for (std::size_t j = 0; j < i; ++j)
        if (list[j]["metric"] == metric) {
          const std::string path = "objectives[" + std::to_string(i) + "].metric";
          return w_.fail(w_.mark_of(path), path, "'" + metric + "' is listed twice");
        }
      c.objectives.push_back({metric, list[i]["mode"] == "max"});
      c.noisy = c.noisy || list[i].value("noisy", false);
    }
    root_.erase("objective");
    root_["objectives"] = list;
    return Status::Ok();
  }

  Status check_space(CampaignConfig& c) {
    json& space = root_["space"];
    const std::string kind = root_["trainer"]["kind"].get<std::string>();
    const std::string algorithm = root_["search"]["algorithm"].get<std::string>();
    std::vector<search::ParamSpec> specs;
    for (const auto& name : w_.space_order()) {
      json& p = space[name];
      const std::string path = "space." + name;
      HPCTUNE_TRY(check_param(name, p, space));
      if (algorithm == "grid" && p["type"] == "float" && !p.contains("resolution"))
        return w_.fail(w_.mark_of(path), path,
                       "the grid search needs 'resolution' (the number of grid points) on a float parameter");
      HPCTUNE_TRY(check_against_trainer(name, p, kind));
      specs.push_back(to_spec(name, p));
    }
    auto created = search::Space::create(std::move(specs));
    if (!created.ok()) {
      // Space::create names the parameter first ("lr: ..."): put it at that parameter's key.
      const std::string& message = created.error().message();
      for (const auto& name : w_.space_order())
        if (message.rfind(name + ": ", 0) == 0)
          return w_.fail(w_.mark_of("space." + name), "space." + name, message.substr(name.size() + 2));
      return w_.fail(w_.mark_of("space"), "space", message);
    }
    c.space = std::move(created).value();
    if (algorithm == "grid") HPCTUNE_TRY(check_grid_size(c));
    return Status::Ok();
  }

  // The grid is counted before anything is listed; larger than max_trials, `run` would refuse it.
  Status check_grid_size(const CampaignConfig& c) {
    const int64_t limit = std::min(c.max_trials, search::kMaxGridPoints);
    const std::string most = limit == c.max_trials ? "max_trials (" + std::to_string(c.max_trials) + ")"
                                                   : std::to_string(search::kMaxGridPoints) + ", the most a grid may have";
    for (const auto& p : c.space.params()) {
      const int64_t n = search::grid_value_count(p);
      if (n > limit)
        return w_.fail(w_.mark_of("space." + p.name), "space." + p.name,
                       std::to_string(n) + " grid values on their own, more than " + most +
                           (p.type == search::ParamType::kFloat ? "; lower the resolution" : "; raise step or give a resolution"));
    }
    auto size = search::grid_size(c.space, limit);
    if (!size.ok()) {
      const std::string& message = size.error().message();
      for (const auto& name : w_.space_order())
        if (message.rfind(name + ": ", 0) == 0)
          return w_.fail(w_.mark_of("space." + name), "space." + name, message.substr(name.size() + 2));
      return w_.fail(w_.mark_of("space"), "space", message);
    }
    if (*size > limit) {
      const std::string count =
          *size == std::numeric_limits<int64_t>::max() ? "more than 9223372036854775807" : std::to_string(*size);
      if (limit == c.max_trials)
        return w_.fail(w_.mark_of("search.max_trials"), "search.max_trials",
                       "the grid has " + count + " points, more than max_trials (" + std::to_string(c.max_trials) +
                           "); raise max_trials or lower the resolutions");
      return w_.fail(w_.mark_of("space"), "space",
                     "the grid has " + count + " points, more than " + std::to_string(search::kMaxGridPoints) +
                         ", the most a grid may have");
    }
    return Status::Ok();
  }

  Status check_search(CampaignConfig& c) {
    const json& s = root_["search"];
    c.algorithm = s["algorithm"].get<std::string>();
    c.max_trials = s["max_trials"].get<int64_t>();
    c.max_time_s = s["max_time"].get<double>();
    c.max_attempts = s["max_attempts"].get<int64_t>();
    c.max_failures = s["max_failures"].get<int64_t>();
    c.warm_start = s["warm_start"].get<std::string>();
    c.search_settings = s["settings"];
    if (c.algorithm == "cmaes" && c.objectives.size() > 1)  // what make_cmaes refuses, reported with its place
      return w_.fail(w_.mark_of("search.algorithm"), "search.algorithm",
                     "cmaes optimizes one objective, but " + std::to_string(c.objectives.size()) + " are given");
    if (c.algorithm == "rl" && c.objectives.size() > 1)  // a REINFORCE reward is one number
      return w_.fail(w_.mark_of("search.algorithm"), "search.algorithm",
                     "rl optimizes one objective, but " + std::to_string(c.objectives.size()) + " are given");
    if (s.contains("stop_when") && s["stop_when"].is_object()) {
      const json& w = s["stop_when"];
      StopWhen stop;
      stop.metric = w["metric"].get<std::string>();
      stop.reaches = w["reaches"].get<double>();
      if (w.contains("mode")) {
        stop.maximize = w["mode"] == "max";
      } else {
        for (const auto& o : c.objectives)
          if (o.metric == stop.metric) stop.maximize = o.maximize;
        root_["search"]["stop_when"]["mode"] = stop.maximize ? "max" : "min";
      }
      c.stop_when = stop;
    }
    // search.init is the algorithm's `init` setting, for the algorithms that have one; its
    // default is the algorithm's.
    const bool given = root_["search"].contains("init");
    if (given) c.init = s["init"].get<std::string>();
    auto decls = search::searcher_settings(c.algorithm);
    if (!decls.ok()) {  // an algorithm this build does not know: passed on as given
      if (given) c.search_settings["init"] = c.init;
      return Status::Ok();
    }
    const search::SettingDecl* init = nullptr;
    for (const auto& d : decls.value())
      if (d.key == "init") init = &d;
    if (init == nullptr) {
      if (given)
        return w_.fail(w_.mark_of("search.init"), "search.init",
                       "the " + c.algorithm + " search has no initial design; remove init");
      return Status::Ok();
    }
    if (!given) c.init = init->default_value.get<std::string>();
    c.search_settings["init"] = c.init;
    root_["search"]["init"] = c.init;
    if (c.algorithm == "evolution") {
      const int64_t p = c.search_settings["population"].get<int64_t>();
      const int64_t k = c.search_settings["sample_size"].get<int64_t>();
      if (k > p) {
        const std::string at = w_.given("search.settings.sample_size") ? "search.settings.sample_size"
                                                                       : "search.settings.population";
        return w_.fail(w_.mark_of(at), at,
                       "sample_size (" + std::to_string(k) + ") must be at most population (" + std::to_string(p) + ")");
      }
    }
    return Status::Ok();
  }

  Status check_early_stopping(CampaignConfig& c) {
    json settings = root_["early_stopping"];
    c.early_stopping = settings["kind"].get<std::string>();
    settings.erase("kind");
    if ((c.early_stopping == "asha" || c.early_stopping == "hyperband") && !w_.given("early_stopping.max_t")) {
      // Without a known last step ASHA judges the trainer's last epoch and records fully trained
      // trials as pruned (issue 9, item 23): default max_t to the trainer's steps or epochs.
      if (auto last = trainer_last_step()) {
        settings["max_t"] = *last;
        root_["early_stopping"]["max_t"] = *last;
      }
    }
    if (c.early_stopping == "hyperband" && settings["max_t"].get<int64_t>() < settings["grace_period"].get<int64_t>()) {
      const std::string at = w_.given("early_stopping.max_t") ? "early_stopping.max_t" : "early_stopping.grace_period";
      return w_.fail(w_.mark_of(at), at,
                     "grace_period (" + std::to_string(settings["grace_period"].get<int64_t>()) +
                         ") must be at most max_t (" + std::to_string(settings["max_t"].get<int64_t>()) +
                         (w_.given("early_stopping.max_t") ? ")" : ", the trainer's last step)"));
    }
    c.early_stopping_settings = settings;
    if (c.early_stopping != "none" && c.objectives.size() > 1)
      return w_.fail(w_.mark_of("early_stopping.kind"), "early_stopping.kind",
                     c.early_stopping + " judges one objective, but " + std::to_string(c.objectives.size()) +
                         " are given");
    return Status::Ok();
  }

  // The last step the trainer reports at: its step setting (the catalog's, trainer_settings.h), the
  // largest value when that setting is searched; nullopt for a kind whose steps are its reports' own.
  std::optional<int64_t> trainer_last_step() const {
    const json& t = root_["trainer"];
    const auto* can = trainers::trainer_capabilities(t["kind"].get<std::string>());
    const char* key = can != nullptr ? can->step_setting : nullptr;
    if (key == nullptr) return std::nullopt;
    std::optional<int64_t> last;
    auto consider = [&](const json& v) {
      if (v.is_number_integer()) last = std::max(last.value_or(v.get<int64_t>()), v.get<int64_t>());
    };
    const json& space = root_["space"];
    if (space.contains(key)) {
      const json& p = space[key];
      const std::string type = p["type"].get<std::string>();
      if (type == "int") consider(p["high"]);
      else if (type == "choice") for (const auto& v : p["values"]) consider(v);
      else if (type == "fixed") consider(p["value"]);
      return last;
    }
    if (t.contains(key)) consider(t[key]);
    return last;
  }

  Status check_trainer(CampaignConfig& c) {
    // trainer.data_seed (the classifier kinds): the campaign's seed unless given (set_seed).
    c.data_seed_given = w_.given("trainer.data_seed");
    c.trainer = root_["trainer"];
    const json& t = c.trainer;
    if (t.contains("layers") && t.contains("hidden") && t["hidden"].is_array() &&
        t["hidden"].size() != t["layers"].get<std::size_t>())
      return w_.fail(w_.mark_of("trainer.layers"), "trainer.layers",
                     std::to_string(t["layers"].get<int64_t>()) + " does not match hidden, which lists " +
                         std::to_string(t["hidden"].size()) + " layers (give layers with a single-integer hidden)");
    if (t.contains("classes")) {
      if (auto problem = classes_problem_at(t["classes"], "trainer.classes"))
        return w_.fail(w_.mark_of(problem->first), problem->first, problem->second);
    }
    const auto* can = trainers::trainer_capabilities(t["kind"].get<std::string>());
    if (can == nullptr) return Status::Ok();  // the walker refused the kind
    if (can->params == trainers::TrainerParams::kTestFunctionArgs) HPCTUNE_TRY(check_function_trainer(c));
    if (const char* key = can->command_setting; key != nullptr && t.contains(key) && t[key].is_string()) {
      if (auto unsafe = unsafe_placeholder(t[key].get<std::string>()))
        return w_.fail(w_.mark_of(std::string("trainer.") + key), std::string("trainer.") + key, *unsafe);
      HPCTUNE_TRY(check_command_placeholders(c, key));
    }
    if (can->provides_setting != nullptr) HPCTUNE_TRY(check_provides(c, can->provides_setting));
    return check_assign_size(c);
  }

  // The kind's provides setting: a list of "predictions" and "checkpoints", each once.
  Status check_provides(const CampaignConfig& c, const char* key) {
    const std::string path = std::string("trainer.") + key;
    const json& list = c.trainer.value(key, json::array());
    std::set<std::string> seen;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      const json& v = list[i];
      const bool known = v.is_string() && (v == trainers::kProvidesPredictions || v == trainers::kProvidesCheckpoints);
      if (!known)
        return w_.fail(w_.mark_of(at), at,
                       "unknown value " + v.dump() + "; expected " + trainers::kProvidesPredictions + " or " +
                           trainers::kProvidesCheckpoints);
      if (!seen.insert(v.get<std::string>()).second)
        return w_.fail(w_.mark_of(at), at, v.get<std::string>() + " is listed twice");
    }
    return Status::Ok();
  }

  // A trial's assign carries its parameters and every fixed trainer setting: one larger than a
  // message may be is dropped by the transport, and every attempt is lost without a word. Add up
  // the encoded sizes (a parameter's largest value), with room for the rest of the message.
  Status check_assign_size(const CampaignConfig& c) {
    constexpr int64_t kRoom = 64 << 10;  // ids, seed, trial directory, framing
    auto encoded = [](const json& v) { return static_cast<int64_t>(json::to_msgpack(v).size()); };
    int64_t total = kRoom;
    std::string largest;
    int64_t largest_size = -1;
    auto add = [&](const std::string& path, int64_t size) {
      total += size;
      if (size > largest_size) largest = path, largest_size = size;
    };
    for (auto it = c.trainer.begin(); it != c.trainer.end(); ++it)
      add("trainer." + it.key(), static_cast<int64_t>(it.key().size()) + encoded(it.value()));
    for (const auto& name : w_.space_order()) {
      const json& p = root_["space"][name];
      int64_t size = 16;  // a number
      const std::string type = p["type"].get<std::string>();
      if (type == "fixed") size = encoded(p["value"]);
      else if (type == "choice") for (const auto& v : p["values"]) size = std::max(size, encoded(v));
      add(type == "fixed" && w_.given("space." + name + ".value") ? "space." + name + ".value" : "space." + name,
          static_cast<int64_t>(name.size()) + size);
    }
    if (total <= kMaxMessageBytes) return Status::Ok();
    return w_.fail(w_.mark_of(largest), largest,
                   std::to_string(largest_size) + " bytes encoded, and a trial's assign would be about " +
                       std::to_string(total) + " bytes, more than the " + std::to_string(kMaxMessageBytes) +
                       " a message may have (pass large data through a file)");
  }

  // Every `{name}` of the command must name a parameter or one of the values the command trainer
  // provides; otherwise every trial fails with the same message. The grammar is that of
  // trainers::render_command (this library does not link the trainers).
  Status check_command_placeholders(const CampaignConfig& c, const char* key) {
    const std::string path = std::string("trainer.") + key;
    const std::string& cmd = c.trainer[key].get_ref<const std::string&>();
    const auto& kBuiltins = kTemplateBuiltins;
    auto name_char = [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_' || ch == '.' || ch == '-';
    };
    for (std::size_t i = 0; i < cmd.size(); ++i) {
      if (cmd[i] != '{') continue;
      if (i + 1 < cmd.size() && cmd[i + 1] == '{') {
        ++i;
        continue;
      }
      std::size_t end = i + 1;
      while (end < cmd.size() && name_char(cmd[end])) ++end;
      if (end == i + 1 || end >= cmd.size() || cmd[end] != '}')
        return w_.fail(w_.mark_of(path), path,
                       "malformed placeholder at character " + std::to_string(i + 1) +
                           " (write {name} for a parameter, {{ and }} for literal braces)");
      const std::string name = cmd.substr(i + 1, end - i - 1);
      bool known = root_["space"].contains(name);
      for (const char* b : kBuiltins) known = known || name == b;
      if (!known) {
        std::vector<Candidate> names;
        for (const auto& p : w_.space_order()) names.push_back({p, p});
        for (const char* b : kBuiltins) names.push_back({b, b});
        std::string what = "'{" + name + "}' names no parameter of the space";
        if (auto near = did_you_mean(name, names)) what += "; did you mean '{" + *near + "}'?";
        else what += " (nor trial_id, trial_dir, attempt, attempt_dir, seed, ranks)";
        return w_.fail(w_.mark_of(path), path, what);
      }
      i = end;
    }
    return Status::Ok();
  }

  // The function trainer takes exactly x1..xd: a dimension the function does not allow, or a space
  // that lacks one of them or has another parameter, would fail every trial; say so before.
  Status check_function_trainer(const CampaignConfig& c) {
    const json& t = c.trainer;
    const std::string name = t["name"].get<std::string>();
    const int64_t dim = t["dim"].get<int64_t>();
    auto fn = search::make_test_function(name, static_cast<int>(dim));
    if (!fn.ok()) {
      const std::string at = w_.given("trainer.dim") ? "trainer.dim" : "trainer.name";
      return w_.fail(w_.mark_of(at), at, fn.error().message());
    }
    // Not "x" + std::to_string(i): GCC 12 warns falsely there (-Wrestrict, PR 105329).
    auto x_name = [](int i) {
      std::string x = "x";
      x += std::to_string(i);
      return x;
    };
    const std::string range = "x1.." + x_name(fn->dim);
    for (const auto& param : w_.space_order()) {
      // A searched setting of the trainer itself (noise, steps) was checked by check_against_trainer.
      bool known = false;
      for (const auto* setting : children("trainer")) known = known || setting->path == "trainer." + param;
      for (int i = 1; i <= fn->dim; ++i) known = known || param == x_name(i);
      if (!known)
        return w_.fail(w_.mark_of("space." + param), "space." + param,
                       "not a parameter of " + name + ", which takes " + range + " (trainer.dim)");
    }
    for (int i = 1; i <= fn->dim; ++i) {
      const std::string x = x_name(i);
      if (!root_["space"].contains(x))
        return w_.fail(w_.mark_of("space"), "space",
                       "'" + x + "' is missing: " + name + " takes " + range + " (search or fix each of them)");
    }
    return Status::Ok();
  }

  Status check_resources(CampaignConfig& c) {
    const json& r = root_["resources"];
    Resources& out = c.resources;
    out.backend = r["backend"].get<std::string>();
    out.groups = r["groups"].get<int64_t>();
    out.ranks_data = r["ranks"]["data"].get<int64_t>();
    out.ranks_model = r["ranks"]["model"].get<int64_t>();
    out.threads = r["threads"].get<int64_t>();
    out.heartbeat_interval_s = r["heartbeat_interval"].get<double>();
    out.heartbeat_timeout_s = r["heartbeat_timeout"].get<double>();
    out.max_group_restarts = r["max_group_restarts"].get<int64_t>();
    out.startup_timeout_s = r["startup_timeout"].get<double>();
    out.bind = r["bind"].get<std::string>();
    if (auto problem = endpoint_problem(out.bind)) return w_.fail(w_.mark_of("resources.bind"), "resources.bind", *problem);
    out.security = r["security"].get<std::string>();
    const json& sl = r["slurm"];
    SlurmOptions& so = out.slurm;
    so.partition = sl["partition"].get<std::string>();
    so.account = sl["account"].get<std::string>();
    so.qos = sl["qos"].get<std::string>();
    so.constraint = sl["constraint"].get<std::string>();
    so.ranks_per_node = sl["ranks_per_node"].get<int64_t>();
    so.launch = sl["launch"].get<std::string>();
    so.mpi = sl["mpi"].get<std::string>();
    so.gres = sl["gres"].get<std::string>();
    so.gpus_per_task = sl["gpus_per_task"].get<int64_t>();
    so.cpus_per_task = sl["cpus_per_task"].get<int64_t>();
    so.master_partition = sl["master"]["partition"].get<std::string>();
    so.master_constraint = sl["master"]["constraint"].get<std::string>();
    so.signal_before_s = sl["signal_before"].get<double>();
    so.requeue = sl["requeue"].get<bool>();
    so.setup.clear();
    for (std::size_t i = 0; i < sl["setup"].size(); ++i) {
      const json& line = sl["setup"][i];
      const std::string at = "resources.slurm.setup[" + std::to_string(i) + "]";
      if (!line.is_string())
        return w_.fail(w_.mark_of(at), at, "a shell line (a string), not " + std::string(line.type_name()));
      if (line.get<std::string>().find('\n') != std::string::npos)
        return w_.fail(w_.mark_of(at), at, "one line per item (it holds a line break)");
      so.setup.push_back(line.get<std::string>());
    }
    // Values that go into the batch script as sbatch or srun options: no spaces, quotes or line
    // breaks that would end the option (and start another command).
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"partition", &so.partition},
                                     {"account", &so.account}, {"qos", &so.qos}, {"constraint", &so.constraint},
                                     {"mpi", &so.mpi}, {"gres", &so.gres}, {"master.partition", &so.master_partition},
                                     {"master.constraint", &so.master_constraint}}) {
      for (char ch : *value) {
        if (std::isalnum(static_cast<unsigned char>(ch)) || std::string_view("_-.:,&|[]*=+/").find(ch) != std::string_view::npos)
          continue;
        const std::string at = std::string("resources.slurm.") + key;
        return w_.fail(w_.mark_of(at), at,
                       "'" + *value + "' holds '" + std::string(1, ch) +
                           "': only letters, digits and _-.:,&|[]*=+/ go into an sbatch option");
      }
    }
    if (out.ranks_data * out.ranks_model > kMaxRanksPerGroup) {
      const std::string at = w_.given("resources.ranks.model") ? "resources.ranks.model" : "resources.ranks.data";
      return w_.fail(w_.mark_of(at), "resources.ranks",
                     std::to_string(out.ranks_data) + " data x " + std::to_string(out.ranks_model) + " model = " +
                         std::to_string(out.ranks_data * out.ranks_model) + " ranks per group, more than " +
                         std::to_string(kMaxRanksPerGroup));
    }
    if (out.heartbeat_timeout_s <= out.heartbeat_interval_s) {
      const std::string interval = format_number(out.heartbeat_interval_s);
      const std::string timeout = format_number(out.heartbeat_timeout_s);
      if (w_.given("resources.heartbeat_timeout"))
        return w_.fail(w_.mark_of("resources.heartbeat_timeout"), "resources.heartbeat_timeout",
                       timeout + " s must be greater than heartbeat_interval (" + interval + " s)");
      return w_.fail(w_.mark_of("resources.heartbeat_interval"), "resources.heartbeat_interval",
                     interval + " s must be less than heartbeat_timeout (" + timeout + " s, the default)");
    }
    return Status::Ok();
  }

 private:
  Status check_param(const std::string& name, json& p, const json& space) {
    const std::string path = "space." + name;
    const std::string type = p["type"].get<std::string>();
    if (type == "float" || type == "int") {
      const double low = p["low"].get<double>(), high = p["high"].get<double>();
      if (type == "int") {
        for (const char* bound : {"low", "high"}) {
          const double x = p[bound].get<double>();
          const std::string at = path + "." + bound;
          if (std::floor(x) != x)
            return w_.fail(w_.mark_of(at), at, format_number(x) + " is not a whole number (the parameter is an int)");
          // The search works on doubles: past 2^53 neighbouring integers are the same double
          // (and 2^63 - 1 would wrap when converted back).
          if (std::fabs(x) > kMaxExactInt)
            return w_.fail(w_.mark_of(at), at,
                           w_.text_of(at, format_number(x)) + " is too large for an int parameter (at most " +
                               std::to_string(static_cast<int64_t>(kMaxExactInt)) + " in magnitude)");
        }
        p["low"] = static_cast<int64_t>(low);
        p["high"] = static_cast<int64_t>(high);
      } else if (!std::isfinite(high - low)) {
        return w_.fail(w_.mark_of(path + ".high"), path + ".high",
                       "the range " + format_number(low) + ".." + format_number(high) + " is too wide to sample");
      }
      if (low >= high)
        return w_.fail(w_.mark_of(path + ".low"), path + ".low",
                       w_.text_of(path + ".low", format_number(low)) + " must be less than high (" +
                           w_.text_of(path + ".high", format_number(high)) + ")");
      if (p["log"].get<bool>() && low <= 0)
        return w_.fail(w_.mark_of(path + ".low"), path + ".low",
                       "a log scale needs low > 0, got " + format_number(low));
    } else if (type == "choice") {
      const json& values = p["values"];
      // Hashed, not compared pairwise (there may be 100,000 values).
      std::unordered_map<std::string, std::size_t> seen;
      for (std::size_t i = 0; i < values.size(); ++i)
        if (auto key = search::Space::choice_key(values[i]); key && !seen.emplace(*key, i).second) {
          const std::string item = path + ".values[" + std::to_string(i) + "]";
          return w_.fail(w_.mark_of(item), item, quoted_value(values[i]) + " is listed twice");
        }
    }
    if (p.contains("when")) {
      const auto& when = p["when"];
      const std::string parent = when.begin().key();
      const std::string at = path + ".when." + parent;
      if (parent == name) return w_.fail(w_.mark_of(at), path + ".when", "a parameter cannot depend on itself");
      if (!space.contains(parent)) {
        std::vector<Candidate> names;
        for (const auto& other : w_.space_order())
          if (other != name) names.push_back({other, other});
        std::string what = "condition on unknown parameter '" + parent + "'";
        if (auto near = did_you_mean(parent, names)) what += "; did you mean '" + *near + "'?";
        return w_.fail(w_.mark_of(at), path + ".when", what);
      }
    }
    return Status::Ok();
  }

  // A space parameter must be a setting of a built-in trainer, of a type the setting accepts.
  Status check_against_trainer(const std::string& name, json& p, const std::string& kind) {
    const std::string path = "space." + name;
    if (free_space_name(kind, name)) return Status::Ok();
    std::string not_found;
    const Setting* setting = trainer_setting_of(kind, name, &not_found);
    if (setting == nullptr) return w_.fail(w_.mark_of(path), path, not_found);
    const std::string type = p["type"].get<std::string>();
    const std::string of = " (trainer." + name + ")";
    auto check = [&](const json& v, const std::string& at) -> Result<json> {
      auto checked = check_value(*setting, v);
      if (!checked.ok()) return w_.fail(w_.mark_of(at), at, checked.error().message() + of);
      return checked;
    };
    if (type == "float" || type == "int") {
      const bool numeric = is_numeric_type(setting->type) || (type == "int" && setting->type == Type::kIntList);
      if (!numeric || (type == "float" && setting->type == Type::kInt)) {
        const bool integral = setting->type == Type::kInt || setting->type == Type::kIntList;
        const std::string use = integral ? "int" : "choice";
        return w_.fail(w_.mark_of(path + ".type"), path + ".type",
                       "trainer." + name + " takes " + describe_type(*setting) + "; use type: " + use);
      }
      for (const char* bound : {"low", "high"}) HPCTUNE_TRY(check(p[bound], path + "." + bound));
    } else if (type == "choice") {
      json& values = p["values"];
      for (std::size_t i = 0; i < values.size(); ++i) {
        HPCTUNE_ASSIGN(auto v, check(values[i], path + ".values[" + std::to_string(i) + "]"));
        values[i] = v;  // "10s" -> 10
      }
    } else if (type == "fixed") {
      HPCTUNE_ASSIGN(auto v, check(p["value"], path + ".value"));
      p["value"] = v;
    }
    return Status::Ok();
  }

  static search::ParamSpec to_spec(const std::string& name, const json& p) {
    search::ParamSpec spec;
    spec.name = name;
    const std::string type = p["type"].get<std::string>();
    if (type == "float" || type == "int") {
      spec.type = type == "float" ? search::ParamType::kFloat : search::ParamType::kInt;
      spec.low = p["low"].get<double>();
      spec.high = p["high"].get<double>();
      spec.log = p["log"].get<bool>();
      if (p.contains("step")) spec.step = p["step"].get<int64_t>();
      if (p.contains("resolution")) spec.resolution = p["resolution"].get<int64_t>();
    } else if (type == "choice") {
      spec.type = search::ParamType::kChoice;
      for (const auto& v : p["values"]) spec.choices.push_back(v);
      spec.ordered = p["ordered"].get<bool>();
    } else {
      spec.type = search::ParamType::kFixed;
      spec.value = p["value"];
    }
    if (p.contains("when")) {
      const auto& when = p["when"];
      search::Condition condition;
      condition.parent = when.begin().key();
      for (const auto& v : when.begin().value()) condition.values.push_back(v);
      spec.when = std::move(condition);
    }
    return spec;
  }

  Walker& w_;
  json& root_;
};

Result<YNode> read_tree(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  TreeBuilder builder(text);
  auto located = [&](Mark m, const std::string& path, const std::string& what) {
    std::string message = source + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": ";
    if (!path.empty()) message += path + ": ";
    return err(Errc::kConfig, message + what);
  };
  // The line and column of a byte offset.
  auto mark_at = [&](std::size_t offset) {
    const auto before = text.begin() + static_cast<std::ptrdiff_t>(offset);
    const int line = 1 + static_cast<int>(std::count(text.begin(), before, '\n'));
    const std::size_t line_start = offset == 0 ? std::string::npos : text.rfind('\n', offset - 1);
    const std::size_t column = line_start == std::string::npos ? offset : offset - line_start - 1;
    return Mark{line, static_cast<int>(column) + 1};
  };
  if (auto deep = flow_too_deep(text))
    return located(mark_at(*deep), "", "nested more than " + std::to_string(kMaxDepth) + " levels deep");
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
      if (builder.problem()) break;
    }
  } catch (const StopReading&) {
    // builder.problem() is set: reported below.
  } catch (const YAML::Exception& e) {
    // A problem noted earlier in the file comes first.
    if (builder.problem()) {
      const auto& p = *builder.problem();
      return located(p.mark, p.path, p.what);
    }
    const Mark at = to_mark(e.mark);
    if (auto tab = tab_in_indentation(text, at.line))
      return located(*tab, "", "YAML syntax error: a tab in the indentation (YAML indents with spaces)");
    return located(at, builder.current_path(), "YAML syntax error: " + explain_syntax_error(e.msg));
  }
  if (builder.problem()) {
    const auto& p = *builder.problem();
    return located(p.mark, p.path, p.what);
  }
  // A byte that is not UTF-8 outside any value (in a comment): the text is stored with the
  // campaign and printed back, so the file is refused as a whole.
  if (auto bad = invalid_utf8_at(text)) return located(mark_at(*bad), "", "the file is not valid UTF-8 here; save it as UTF-8");
  auto& root = builder.root();
  if (!root || root->kind == YNode::Kind::kNull)
    return located(Mark{}, "", "the config is empty; it needs at least name, objective, search.max_trials and "
                               "trainer.kind (see configs/reference.yaml)");
  if (root->kind != YNode::Kind::kMap)
    return located(root->mark, "",
                   std::string("the top level must be a map of settings (name: ..., search: ...), got ") +
                       kind_text(*root));
  return std::move(*root);
}

}  // namespace

search::SearchSpec CampaignConfig::search_spec() const {
  search::SearchSpec spec;
  spec.algorithm = algorithm;
  spec.settings = search_settings;
  spec.space = space;
  spec.objectives = objectives;
  spec.seed = seed;
  spec.max_trials = max_trials;
  spec.noisy = noisy;
  return spec;
}

search::StopperSpec CampaignConfig::stopper_spec() const {
  search::StopperSpec spec;
  spec.kind = early_stopping;
  spec.settings = early_stopping_settings;
  spec.maximize = objectives.empty() || objectives.front().maximize;
  spec.seed = seed;
  return spec;
}

std::optional<ModelStartup> model_startup(const CampaignConfig& c) {
  std::string algorithm = c.algorithm;
  json settings = c.search_settings;
  if (algorithm == "auto") {  // what auto runs, with that algorithm's defaults
    auto picked = search::auto_choice(c.search_spec());
    if (!picked.ok()) return std::nullopt;
    algorithm = picked->algorithm;
    settings = json::object();
  }
  const char* key = algorithm == "tpe" ? "n_startup" : algorithm == "bayesian" ? "n_initial" : nullptr;
  if (key == nullptr) return std::nullopt;
  ModelStartup out;
  const json& given = settings.contains(key) ? settings[key] : json();
  int64_t searched = 0;
  for (const auto& p : c.space.params()) searched += p.type == search::ParamType::kFixed ? 0 : 1;
  out.random_trials = given.is_number_integer() ? given.get<int64_t>()
                      : algorithm == "tpe"      ? search::startup_trials(c.max_trials, searched)
                                                : search::default_n_initial(c.space, c.max_trials);
  out.model_used = out.random_trials < c.max_trials;
  const std::string n = std::to_string(out.random_trials), budget = std::to_string(c.max_trials);
  if (out.model_used)
    out.text = algorithm + ": the first " + n + " of " + budget + " trials are random start-up; the model suggests from trial " +
               std::to_string(out.random_trials + 1) + " on";
  else
    out.text = algorithm + ": " + n + " random start-up trials of " + budget +
               "; the model is never used (lower search.settings." + key + " or raise search.max_trials)";
  return out;
}

namespace {

using Rename = std::function<std::string(const std::string&)>;

// One campaign (or one stage's view of it) from its tree.
Result<CampaignConfig> parse_tree(const YNode& tree, const std::string& yaml_text, const std::string& source_name,
                                  Rename rename) {
  Walker walker(source_name, std::move(rename));
  json root;
  HPCTUNE_TRY(walker.section(&tree, "", "", Mark{}, root, nullptr));

  CampaignConfig c;
  c.source = source_name;
  c.text = yaml_text;
  Builder b(walker, root);
  HPCTUNE_TRY(b.check_name());
  c.name = root["name"].get<std::string>();
  if (!root.contains("storage")) root["storage"] = c.name + ".db";
  c.storage = root["storage"].get<std::string>();
  c.storage_access = root["storage_access"].get<std::string>();
  c.seed = static_cast<uint64_t>(root["seed"].get<int64_t>());
  HPCTUNE_TRY(b.check_objectives(c));
  HPCTUNE_TRY(b.check_search(c));
  HPCTUNE_TRY(b.check_space(c));
  HPCTUNE_TRY(b.check_early_stopping(c));
  HPCTUNE_TRY(b.check_trainer(c));
  HPCTUNE_TRY(b.check_resources(c));
  c.normalized = std::move(root);
  c.set_seed(c.seed);
  return c;
}

YNode scalar(const std::string& text, Mark mark) {
  YNode n;
  n.kind = YNode::Kind::kScalar;
  n.text = text;
  n.mark = mark;
  return n;
}

YNode map_of(std::vector<YEntry> entries, Mark mark) {
  YNode n;
  n.kind = YNode::Kind::kMap;
  n.mark = mark;
  n.entries = std::move(entries);
  return n;
}

// The keys a stage may give that stand for the top level's sections.
constexpr const char* kStageSections[] = {"search", "space", "early_stopping"};

// The mark of the node at `at` below `node` ("[2].params.lr": item 2, key params, key lr), or of
// the deepest node on the way that exists; keys are marked where the key is written.
Mark mark_below(const YNode& node, Mark node_mark, const std::string& at) {
  const YNode* n = &node;
  Mark mark = node_mark;
  std::size_t i = 0;
  while (i < at.size() && n != nullptr) {
    if (at[i] == '[') {
      const std::size_t close = at.find(']', i);
      if (close == std::string::npos || n->kind != YNode::Kind::kSeq) break;
      const std::size_t k = std::strtoull(at.c_str() + i + 1, nullptr, 10);
      if (k >= n->items.size()) break;
      n = &n->items[k];
      mark = n->mark;
      i = close + 1;
    } else if (at[i] == '.') {
      std::size_t end = at.find_first_of(".[", i + 1);
      if (end == std::string::npos) end = at.size();
      const YEntry* e = find_entry(n, std::string_view(at).substr(i + 1, end - i - 1));
      if (e == nullptr) break;
      mark = e->key_mark;
      n = &e->value;
      i = end;
    } else {
      break;
    }
  }
  return mark;
}

// A workflow: `stages:` (config.h, StageConfig). The top level is checked together with the
// stages' items by one walk; then each stage's own view of the campaign is parsed from a tree of
// the top level's keys with the stage's search, space, early_stopping and trainer keys laid over
// them, its errors named by the stage's key paths.
//
// Linear in the size of the config: the top level (less `stages`) is copied once, not with every
// stage's; stages that set none of those keys (a one-line ensemble) share one view; the views
// that are parsed may together hold at most kMaxStageViewNodes nodes (the top level repeated in
// each stage with keys of its own); the config's text is kept by the campaign, not by each view.
// --- the workflow (parse_workflow and its parts) ---

// "an ensemble", "a transfer": a stage kind with its article.
std::string an(const std::string& kind) {
  const bool vowel = !kind.empty() && std::string_view("aeiou").find(kind[0]) != std::string_view::npos;
  return (vowel ? "an " : "a ") + kind;
}

// "file:line:col: path: what", the place of every workflow message.
Error place_error(const std::string& source, Mark m, const std::string& path, const std::string& what) {
  return err(Errc::kConfig, source + ":" + std::to_string(m.line) + ":" + std::to_string(m.column) + ": " + path +
                                ": " + what);
}

// What the parts of parse_workflow share: the file's name and the walker's places of the keys.
struct WorkflowPlaces {
  const std::string& source;
  const Walker& walker;
};

// Cycles: a depth-first walk along `from`, with a stack of its own (a chain of thousands of stages
// is no recursion); the first cycle found is named at the `from` that closes it.
Status refuse_cycles(const std::vector<StageConfig>& stages, const std::map<std::string, std::size_t>& index,
                     const WorkflowPlaces& places) {
  std::vector<int> state(stages.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<std::size_t, std::size_t>> path;  // (stage, its next `from` to follow)
  for (std::size_t start = 0; start < stages.size(); ++start) {
    if (state[start] != 0) continue;
    state[start] = 1;
    path.push_back({start, 0});
    while (!path.empty()) {
      const std::size_t i = path.back().first;
      if (path.back().second == stages[i].from.size()) {
        state[i] = 2;
        path.pop_back();
        continue;
      }
      const std::size_t j = index.at(stages[i].from[path.back().second++]);
      if (state[j] == 1) {
        std::string cycle;
        auto first = std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.first == j; });
        for (auto it = first; it != path.end(); ++it) cycle += stages[it->first].name + " -> ";
        cycle += stages[j].name;
        const std::string at = "stages[" + std::to_string(i) + "].from";
        return place_error(places.source, places.walker.mark_of(at), at,
                           "the stages form a cycle: " + cycle + " (each would wait for the other)");
      }
      if (state[j] == 0) {
        state[j] = 1;
        path.push_back({j, 0});
      }
    }
  }
  return Status::Ok();
}

// The stages' graph: names valid and unique (index: each name's stage), each `from` a list of
// other stages (an ensemble, and a transfer without a checkpoint of its own, needs one), no cycle.
Status check_stage_graph(const json& items, const WorkflowPlaces& places, std::vector<StageConfig>& stages,
                         std::map<std::string, std::size_t>& index) {
  const Walker& walker = places.walker;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) {
    return place_error(places.source, m, path, what);
  };
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = "stages[" + std::to_string(i) + "]";
    StageConfig& st = stages[i];
    st.name = items[i]["name"].get<std::string>();
    st.kind = items[i]["kind"].get<std::string>();
    if (st.name.empty() || !std::all_of(st.name.begin(), st.name.end(), [](unsigned char ch) {
          return std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-';
        }))
      return fail(walker.mark_of(at + ".name"), at + ".name",
                  "'" + st.name + "' may contain only letters, digits, '.', '_' and '-'");
    if (auto [it, fresh] = index.emplace(st.name, i); !fresh)
      return fail(walker.mark_of(at + ".name"), at + ".name",
                  "'" + st.name + "' is already the name of stages[" + std::to_string(it->second) + "]");
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = "stages[" + std::to_string(i) + "].from";
    StageConfig& st = stages[i];
    if (items[i].contains("from")) {
      const json& from = items[i]["from"];
      const json list_of = from.is_array() ? from : json::array({from});
      std::set<std::string> listed;
      for (const auto& f : list_of) {
        if (!f.is_string())
          return fail(walker.mark_of(at), at, "expected a stage name or a list of them, got " + f.dump());
        const std::string name = f.get<std::string>();
        if (name == st.name) return fail(walker.mark_of(at), at, "a stage cannot consume itself");
        if (!index.count(name)) {
          std::string hint;
          std::vector<Candidate> candidates;
          std::vector<std::string> names;
          for (const auto& other : stages) {
            candidates.push_back({other.name, other.name});
            names.push_back(other.name);
          }
          if (auto near = did_you_mean(name, candidates)) hint = "; did you mean '" + *near + "'?";
          return fail(walker.mark_of(at), at,
                      "unknown stage '" + name + "' (the stages are " + join(names, ", ") + ")" + hint);
        }
        if (listed.insert(name).second) st.from.push_back(name);
      }
    }
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);  // the walker took only these
    const bool unless = kind.needs_from_unless != nullptr && items[i].contains(kind.needs_from_unless) &&
                        items[i][kind.needs_from_unless].is_string() &&
                        !items[i][kind.needs_from_unless].get<std::string>().empty();
    if (kind.needs_from != nullptr && !unless && st.from.empty())
      return fail(walker.mark_of("stages[" + std::to_string(i) + "]"), "stages[" + std::to_string(i) + "]",
                  an(st.kind) + " stage needs `from`: the stage whose trials it " + kind.needs_from);
  }
  return refuse_cycles(stages, index, places);
}

// A pbt stage's settings against its trainer (own: the stage's view): its step setting kept out
// of the space, steps not given the trainer's, the schedule read as the stage reads it.
Status finish_pbt_settings(StageConfig& st, const CampaignConfig& view, const YNode* item, const std::string& prefix,
                           const WorkflowPlaces& places) {
  const Walker& walker = places.walker;
  const CampaignConfig* own = &view;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) {
    return place_error(places.source, m, path, what);
  };
  // The setting that counts the trainer's steps (the catalog's); a kind without one is refused
  // below (trainer_lacks).
  const auto* can = trainers::trainer_capabilities(own->trainer.value("kind", ""));
  const std::string step_key = can != nullptr && can->step_setting != nullptr ? can->step_setting : "";
  if (!step_key.empty() && own->space.find(step_key) != nullptr)
    return fail(walker.mark_of(prefix + "space"), prefix + "space." + step_key,
                "pbt sets each interval's " + step_key + " itself; give the total as the stage's steps");
  // Not given: the trainer's own count of steps; a kind without one is refused below (trainer_lacks).
  if (st.settings["steps"].is_null() && !step_key.empty() && own->trainer.contains(step_key))
    st.settings["steps"] = own->trainer[step_key];
  const json& perturb = st.settings["perturb"];
  if (perturb.size() != 2 || !perturb[0].is_number() || !perturb[1].is_number() || perturb[0].get<double>() <= 0 ||
      perturb[1].get<double>() <= 0)
    return fail(walker.mark_of(prefix + "perturb"), prefix + "perturb", "expected two positive factors, such as [0.8, 1.2]");
  if (st.settings.contains("schedule") && !st.settings["schedule"].is_null()) {
    // Read as the stage reads it (config/pbt_schedule.h), each interval's params checked as a
    // space's parameters are: every trial would fail on what is wrong here.
    const std::string at = prefix + "schedule";
    const YEntry* given = find_entry(item, "schedule");
    auto place = [&](const std::string& below) {
      return given != nullptr ? mark_below(given->value, given->key_mark, below) : walker.mark_of(at);
    };
    PbtSchedule schedule = read_pbt_schedule(st.settings["schedule"], step_key);
    if (!schedule.ok()) return fail(place(schedule.problem_at), at + schedule.problem_at, schedule.problem);
    const std::string kind = own->trainer.value("kind", "");
    json& intervals = st.settings["schedule"];
    for (std::size_t k = 0; k < intervals.size(); ++k) {
      json& params = intervals[k]["params"];
      for (auto it = params.begin(); it != params.end(); ++it) {
        if (free_space_name(kind, it.key())) continue;
        const std::string below = "[" + std::to_string(k) + "].params." + it.key();
        std::string not_found;
        const Setting* setting = trainer_setting_of(kind, it.key(), &not_found);
        if (setting == nullptr) return fail(place(below), at + below, not_found);
        auto checked = check_value(*setting, it.value());
        if (!checked.ok())
          return fail(place(below), at + below, checked.error().message() + " (trainer." + it.key() + ")");
        it.value() = std::move(checked).value();
      }
    }
    // With a schedule, the stage trains to its end (workflow/pbt_policy.h). A kind without a step
    // setting is refused below (trainer_lacks).
    if (!step_key.empty()) {
      const int64_t end = schedule.replay.back().at(step_key).get<int64_t>();
      if (walker.given(prefix + "steps") && st.settings["steps"].get<int64_t>() != end)
        return fail(walker.mark_of(prefix + "steps"), prefix + "steps",
                    std::to_string(st.settings["steps"].get<int64_t>()) + " is not the end of the schedule (step " +
                        std::to_string(end) + "), which a replay trains to; leave steps out");
      st.settings["steps"] = end;
    }
  }
  return Status::Ok();
}

// A transfer stage's settings: its classes checked, its checkpoint relative to the config's directory.
Status finish_transfer_settings(StageConfig& st, const std::string& prefix, const WorkflowPlaces& places) {
  const Walker& walker = places.walker;
  const std::string& source = places.source;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) { return place_error(source, m, path, what); };
  if (auto problem = classes_problem_at(st.settings.value("classes", json()), prefix + "classes"))
    return fail(walker.mark_of(problem->first), problem->first, problem->second);
  if (!st.settings.value("checkpoint", "").empty()) {
    std::string path = st.settings["checkpoint"].get<std::string>();
    const auto slash = source.rfind('/');
    if (!path.empty() && path[0] != '/' && slash != std::string::npos) path = source.substr(0, slash + 1) + path;
    st.settings["checkpoint"] = path;
  }
  return Status::Ok();
}

// What the inputs must provide: an ensemble their predictions, a transfer their checkpoints, and a
// pbt stage's own trainer checkpoints, as the catalog declares them (trainers/trainer_settings.h).
Status check_stage_needs(const std::vector<StageConfig>& stages, const std::map<std::string, std::size_t>& index,
                         const WorkflowPlaces& places) {
  const Walker& walker = places.walker;
  auto fail = [&](Mark m, const std::string& path, const std::string& what) {
    return place_error(places.source, m, path, what);
  };
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageConfig& st = stages[i];
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);
    if (const char* needs = kind.own_trainer_provides; needs != nullptr && st.own) {
      const std::string at = "stages[" + std::to_string(i) + "]";
      if (auto lack = trainer_lacks(st.kind, st.name, st.own->trainer, needs))
        return fail(walker.mark_of(at + ".kind"), at, *lack);
    }
    const char* needs = kind.inputs_provide;
    if (needs == nullptr) continue;
    const std::string at = "stages[" + std::to_string(i) + "].from";
    for (const auto& f : st.from) {
      const StageConfig& input = stages[index.at(f)];
      if (!workflow::find_stage_kind(input.kind)->trains_inputs)
        return fail(walker.mark_of(at), at, "stage '" + f + "' is " + an(input.kind) + ": it trains no trials of its own");
      if (!input.own) continue;  // its view failed: `deferred` says why
      if (auto lack = trainer_lacks(st.kind, f, input.own->trainer, needs)) return fail(walker.mark_of(at), at, *lack);
      if (auto wrong = task_mismatch(st, f, input.own->trainer, needs)) {
        const std::string task_at = "stages[" + std::to_string(i) + "].task";
        return fail(walker.mark_of(task_at), task_at, *wrong);
      }
    }
  }
  return Status::Ok();
}

Result<CampaignConfig> parse_workflow(const YNode& tree, const std::string& yaml_text, const std::string& source) {
  auto fail = [&](Mark m, const std::string& path, const std::string& what) { return place_error(source, m, path, what); };
  for (const char* key : kStageSections) {
    if (const YEntry* e = find_entry(&tree, key))
      return fail(e->key_mark, key,
                  std::string("with stages, each stage has its own ") + key + " (move it into the stages that use it)");
  }
  const YEntry* stages_entry = find_entry(&tree, "stages");
  // The top level and the items of `stages`, walked with a stand-in search (the stages have their own).
  Walker walker(source);
  const WorkflowPlaces places{source, walker};
  json root;
  {
    YNode checked = tree;
    checked.entries.push_back({"search", stages_entry->key_mark,
                               map_of({{"max_trials", stages_entry->key_mark, scalar("1", stages_entry->key_mark)}},
                                      stages_entry->key_mark)});
    HPCTUNE_TRY(walker.section(&checked, "", "", Mark{}, root, nullptr));
  }
  const json& items = root["stages"];
  if (!items.is_array() || items.empty())
    return fail(stages_entry->key_mark, "stages", "give at least one stage, or leave stages out for a single search");
  const YNode& list = stages_entry->value;

  std::vector<StageConfig> stages(items.size());
  std::map<std::string, std::size_t> index;
  HPCTUNE_TRY(check_stage_graph(items, places, stages, index));

  // Each stage's own view of the campaign. The top level less `stages`, copied once.
  YNode base;
  base.kind = tree.kind;
  base.mark = tree.mark;
  std::size_t base_nodes = 1;
  for (const auto& e : tree.entries) {
    if (e.key == "stages") continue;
    base.entries.push_back(e);
    base_nodes += e.value.size + 1;
  }
  // The views of stages without keys of their own, by their stand-in search's max_trials.
  std::map<std::string, std::shared_ptr<const CampaignConfig>> shared_views;
  std::size_t view_nodes = 0;
  // An ensemble's or transfer's view that fails is reported after the check of its inputs below:
  // "stage 'a' saves no predictions" says more than the view's complaint about a trainer it never runs.
  std::optional<Error> deferred;
  std::optional<std::size_t> main;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    StageConfig& st = stages[i];
    const std::string prefix = "stages[" + std::to_string(i) + "].";
    const YNode* item = i < list.items.size() ? &list.items[i] : nullptr;
    const Mark item_mark = item ? item->mark : stages_entry->key_mark;
    bool has_search = false, has_space = false, own_keys = false;
    if (item != nullptr && item->kind == YNode::Kind::kMap) {
      for (const auto& e : item->entries) {
        if (e.key == "search" || e.key == "space" || e.key == "early_stopping" || e.key == "trainer") own_keys = true;
        has_search = has_search || e.key == "search";
        has_space = has_space || e.key == "space";
      }
    }
    const workflow::StageKind& kind = *workflow::find_stage_kind(st.kind);  // the walker took only these
    using workflow::StageSearch;
    st.own_search = kind.search == StageSearch::kRequired || kind.search == StageSearch::kSpace ||
                    (kind.search == StageSearch::kOptional && has_search);
    if (kind.search == StageSearch::kRequired && !has_search)
      return fail(item_mark, prefix + "search", "missing required key (" + an(st.kind) +
                                                    " stage needs its own search: {max_trials: ...} and space)");
    if (kind.search == StageSearch::kOptional && has_search != has_space)
      return fail(item_mark, prefix + (has_search ? "space" : "search"),
                  an(st.kind) + " stage's nested search needs both search and space");
    const std::string trials =
        kind.trials_setting != nullptr ? std::to_string(items[i][kind.trials_setting].get<int64_t>()) : "1";
    // A stage that reads its inputs' trainers' output reports what they lack before its own view's complaint.
    const bool defers = kind.inputs_provide != nullptr;

    std::shared_ptr<const CampaignConfig> own;
    std::set<std::string> own_trainer_keys;
    auto budget = [&](std::size_t nodes) -> Status {
      view_nodes += nodes;
      if (view_nodes <= kMaxStageViewNodes) return Status::Ok();
      return fail(item_mark, prefix.substr(0, prefix.size() - 1),
                  "the stages' own views of the campaign come to more than " + std::to_string(kMaxStageViewNodes) +
                      " YAML nodes: the top level's " + std::to_string(base_nodes) +
                      " are repeated for every stage with a search, space, early_stopping or trainer of its own "
                      "(fewer such stages, or a smaller top level)");
    };
    if (!own_keys && shared_views.count(trials)) {
      own = shared_views.at(trials);
    } else {
      HPCTUNE_TRY(budget(base_nodes + (item ? item->size : 0)));
      YNode view = base;
      if (item != nullptr && item->kind == YNode::Kind::kMap) {
        for (const auto& e : item->entries) {
          if (e.key == "search" || e.key == "space" || e.key == "early_stopping") view.entries.push_back(e);
          if (e.key == "trainer") {
            if (e.value.kind != YNode::Kind::kMap)
              return fail(e.key_mark, prefix + "trainer", "expected a map of trainer settings");
            auto top = std::find_if(view.entries.begin(), view.entries.end(), [](const YEntry& t) { return t.key == "trainer"; });
            const YEntry* kind = find_entry(&e.value, "kind");
            if (top == view.entries.end() || top->value.kind != YNode::Kind::kMap ||
                (kind != nullptr && (find_entry(&top->value, "kind") == nullptr ||
                                     find_entry(&top->value, "kind")->value.text != kind->value.text))) {
              // Another kind (or no top-level trainer): the stage's trainer stands alone.
              if (top != view.entries.end()) view.entries.erase(top);
              view.entries.push_back(e);
              for (const auto& k : e.value.entries) own_trainer_keys.insert(k.key);
            } else {
              // Looked up by key, not searched: a trainer may have thousands of env entries.
              std::unordered_map<std::string, std::size_t> at;
              for (std::size_t k = 0; k < top->value.entries.size(); ++k) at.emplace(top->value.entries[k].key, k);
              for (const auto& k : e.value.entries) {
                own_trainer_keys.insert(k.key);
                if (auto same = at.find(k.key); same != at.end()) top->value.entries[same->second] = k;
                else top->value.entries.push_back(k);
              }
            }
          }
        }
      }
      if (!has_search)
        view.entries.push_back({"search", item_mark, map_of({{"max_trials", item_mark, scalar(trials, item_mark)}}, item_mark)});
      Rename rename = [prefix, own_trainer_keys](const std::string& path) {
        for (const char* key : kStageSections) {
          const std::string k(key);
          if (path == k || path.rfind(k + ".", 0) == 0) return prefix + path;
        }
        if (path.rfind("trainer.", 0) == 0) {
          const std::string key = path.substr(8, path.find('.', 8) - 8);
          if (own_trainer_keys.count(key)) return prefix + path;
        }
        return path;
      };
      // The text stays with the campaign (c.text below): a copy in each view made the views
      // quadratic in the size of the file.
      auto parsed = parse_tree(view, std::string(), source, rename);
      if (!parsed.ok()) {
        if (!defers) return parsed.error();
        if (!deferred) deferred = parsed.error();
        continue;  // st.own stays empty; nothing below reads a view that failed before returning
      }
      own = std::make_shared<const CampaignConfig>(std::move(parsed).value());
      if (!own_keys) shared_views.emplace(trials, own);
    }
    st.trainer_keys = own_trainer_keys;
    st.settings = items[i];
    for (const char* key : {"name", "kind", "from", "trainer", "search", "space", "early_stopping"}) st.settings.erase(key);
    // The stage's keys as the stage itself reads them (workflow/stage_settings.h: the one reader,
    // with the declarations the table above imported), defaults filled in.
    if (auto read = workflow::read_stage_settings(st.kind, st.settings); read.ok()) {
      st.settings = std::move(read).value();
    } else {
      const std::string& why = read.error().message();
      const std::string key = why.substr(0, why.find(':'));
      return fail(walker.mark_of(prefix + key), prefix + key, why.substr(std::min(why.size(), key.size() + 2)));
    }
    if (st.kind == "pbt") HPCTUNE_TRY(finish_pbt_settings(st, *own, item, prefix, places));
    if (st.kind == "transfer") HPCTUNE_TRY(finish_transfer_settings(st, prefix, places));
    if (!main && st.own_search) main = i;
    st.own = std::move(own);
  }
  HPCTUNE_TRY(check_stage_needs(stages, index, places));
  if (deferred) return *deferred;
  if (!main)
    return fail(stages_entry->key_mark, "stages", "a workflow needs a stage that searches: a search or pbt stage");

  CampaignConfig c = *stages[*main].own;
  c.text = yaml_text;
  c.main_stage = *main;
  json normalized = json::array();
  for (const auto& st : stages) {
    json n = {{"name", st.name}, {"kind", st.kind}, {"from", st.from}};
    for (auto it = st.settings.begin(); it != st.settings.end(); ++it) n[it.key()] = it.value();
    const json& own = st.own->normalized;
    if (st.own_search) {
      n["search"] = own["search"];
      n["space"] = own["space"];
      if (workflow::find_stage_kind(st.kind)->search == workflow::StageSearch::kRequired)
        n["early_stopping"] = own["early_stopping"];
    }
    n["trainer"] = own["trainer"];
    normalized.push_back(std::move(n));
  }
  c.normalized["stages"] = std::move(normalized);
  c.stages = std::move(stages);
  return c;
}

}  // namespace

Result<CampaignConfig> parse_config(const std::string& yaml_text, const std::string& source_name) {
  HPCTUNE_ASSIGN(YNode tree, read_tree(yaml_text, source_name));
  if (find_entry(&tree, "stages") != nullptr) return parse_workflow(tree, yaml_text, source_name);
  return parse_tree(tree, yaml_text, source_name, nullptr);
}

void CampaignConfig::set_seed(uint64_t campaign_seed) {
  seed = campaign_seed;
  // Every stage's view follows (its trainer's data seed included): copies, as views may be shared
  // (between stages, and with a copy of this campaign); one copy of each, however many stages
  // share it. The old views are held until the end, so that no address is reused while mapped.
  std::map<const CampaignConfig*, std::pair<std::shared_ptr<const CampaignConfig>, std::shared_ptr<const CampaignConfig>>>
      copies;
  for (StageConfig& st : stages) {
    if (!st.own || st.own->seed == campaign_seed) continue;
    auto& [old_view, copy] = copies[st.own.get()];
    if (!copy) {
      auto fresh = std::make_shared<CampaignConfig>(*st.own);
      fresh->set_seed(campaign_seed);
      old_view = st.own;
      copy = std::move(fresh);
    }
    st.own = copy;
  }
  if (data_seed_given || !trainer.contains("data_seed")) return;
  trainer["data_seed"] = campaign_seed;
  if (normalized.contains("trainer") && normalized["trainer"].is_object()) normalized["trainer"]["data_seed"] = campaign_seed;
}

Result<CampaignConfig> load_config(const std::string& path) {
  // Every way a config file cannot be used is the user's to fix (exit 2, like any config error):
  // a directory, a device such as /dev/zero (endless; read in full it exhausts memory), a FIFO, a
  // file without read permission, a file far larger than any config.
  auto refuse = [&](const std::string& why) { return err(Errc::kConfig, "cannot read config '" + path + "': " + why); };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) return err(Errc::kNotFound, "cannot read config '" + path + "': " + std::strerror(e));
    return refuse(std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) return refuse("it is a directory");
  if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigBytes)
    return refuse("it is " + std::to_string(st.st_size) + " bytes; a config may have at most " +
                  std::to_string(kMaxConfigBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse(std::strerror(errno));
  // Read in chunks and bounded, even if the file grows between stat and read.
  std::string text;
  char chunk[65536];
  while (text.size() <= kMaxConfigBytes && in.read(chunk, sizeof chunk).gcount() > 0)
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
  if (in.bad()) return err(Errc::kIo, "cannot read config '" + path + "': read failed");
  if (text.size() > kMaxConfigBytes)
    return refuse("it has more than " + std::to_string(kMaxConfigBytes) + " bytes, the most a config may have");
  return parse_config(text, path);
}

}  // namespace hpctune::config
