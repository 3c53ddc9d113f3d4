// The YAML tree of a config (yaml_tree.h): the tree builder fed by yaml-cpp's events, the limits it
// enforces while reading (depth, nodes, UTF-8), the syntax errors explained, and the helpers that
// convert, search and build trees.
#include "config/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "common/limits.h"
#include "config/config.h"
#include "config/settings.h"

namespace hpctune::config {

using nlohmann::json;

namespace {

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

// "[3]", a list item's segment of a key path. Built by append: GCC 12 warns (-Wrestrict, a false
// positive, its bug 105329) on "[" + std::to_string(i) + "]" once inlined into TreeBuilder.
std::string item_segment(std::size_t i) { return std::string("[").append(std::to_string(i)).append("]"); }

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
    const Written written = properties_at(mark);
    check_closed_quote(written.content, n);
    check_text(n);
    // yaml-cpp's tag of an untagged scalar: "?" when plain, "!" when quoted or a block (| >); an
    // explicit '!' reads the same as quoting and is told apart by the text.
    if (tag == "!" && !written.tag) n.quoted = true;
    else if (tag != "?") apply_scalar_tag(tag, n);
    finish(std::move(n), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    check_collection_tag(tag, "tag:yaml.org,2002:seq", mark);
    open(YNode::Kind::kSeq, mark, anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    check_collection_tag(tag, "tag:yaml.org,2002:map", mark);
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
        path += item_segment(top.node.items.size());
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
    return item_segment(top.node.items.size());
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

  // What is written where a node starts (yaml-cpp marks a node at its first property): whether a
  // tag is among its properties (&anchor !tag), and the offset of its content after them.
  struct Written {
    bool tag = false;
    std::size_t content = std::string::npos;
  };
  Written properties_at(const YAML::Mark& mark) const {
    Written w;
    if (mark.pos < 0) return w;
    std::size_t i = static_cast<std::size_t>(mark.pos);
    while (i < text_.size() && (text_[i] == '&' || text_[i] == '!')) {
      w.tag = w.tag || text_[i] == '!';
      while (i < text_.size() && std::string_view(" \t\r\n").find(text_[i]) == std::string_view::npos) ++i;
      while (i < text_.size() && std::string_view(" \t\r\n").find(text_[i]) != std::string_view::npos) ++i;
    }
    w.content = i;
    return w;
  }

  // A YAML tag is read only when it is one of the core schema's and agrees with the value: !!str
  // on any scalar, !!int on an integer, !!float on a number (4 is 4.0), !!bool on true or false,
  // !!null on null, ~ or nothing; the node then reads as the tag says. Any other (!custom, !!binary,
  // !!timestamp, '!', a tag that disagrees) is refused where it is written: hpctune has no use
  // for it, and ignoring it would read the value as something the file does not say.
  void apply_scalar_tag(const std::string& tag, YNode& n) {
    const std::string core = "tag:yaml.org,2002:";
    const std::string name = tag.compare(0, core.size(), core) == 0 ? tag.substr(core.size()) : "";
    const json v = resolve_plain_scalar(n.text);
    bool agrees = false;
    if (name == "str") {
      n.quoted = true;
      n.str_tag = true;
      return;
    } else if (name == "int") {
      agrees = v.is_number_integer();
    } else if (name == "float") {
      agrees = v.is_number();
      // A decimal integer is a float's text too: read as one.
      if (v.is_number_integer() && n.text.find_first_not_of("+-0123456789") == std::string::npos) n.text += ".0";
      else agrees = v.is_number_float();
    } else if (name == "bool") {
      agrees = v.is_boolean();
    } else if (name == "null") {
      agrees = v.is_null();
      if (agrees) n.kind = YNode::Kind::kNull;
    } else {
      note({n.mark, tagged_path(n.text), unread_tag(tag)});
    }
    n.quoted = false;
    if (!agrees)
      note({n.mark, tagged_path(n.text),
            "the YAML tag " + tag_text(tag) + " does not fit the value '" + n.text + "'; remove the tag or fix the value"});
  }

  void check_collection_tag(const std::string& tag, const std::string& fits, const YAML::Mark& mark) {
    if (tag == "?" || tag == fits) return;
    const std::string core = "tag:yaml.org,2002:";
    if (tag == core + "seq" || tag == core + "map")
      note({to_mark(mark), tagged_path(),
            "the YAML tag " + tag_text(tag) + " does not fit a " + (fits == core + "seq" ? "list" : "map") + "; remove the tag"});
    note({to_mark(mark), tagged_path(), unread_tag(tag)});
  }

  // The key path of a tagged node about to be finished: a key's own path when it is a key.
  std::string tagged_path(const std::string& key = "") const {
    std::string path = current_path();
    if (!stack_.empty() && stack_.back().node.kind == YNode::Kind::kMap && !stack_.back().have_key && !key.empty())
      path += (path.empty() ? "" : ".") + key;
    return path;
  }

  static std::string tag_text(const std::string& tag) {
    const std::string core = "tag:yaml.org,2002:";
    if (tag.compare(0, core.size(), core) == 0) return "'!!" + tag.substr(core.size()) + "'";
    return "'" + tag + "'";
  }
  static std::string unread_tag(const std::string& tag) {
    return "the YAML tag " + tag_text(tag) +
           " is not read by hpctune; remove it (a tag may only restate the value's type: !!str, !!int, !!float, "
           "!!bool, !!null, !!seq or !!map)";
  }

  // yaml-cpp 0.7 takes a quoted scalar that is never closed up to the end of the file, swallowing
  // every key after it. Catch that here: the opening quote, if any, is at `pos`.
  void check_closed_quote(std::size_t pos, const YNode& n) {
    if (pos >= text_.size()) return;
    const char q = text_[pos];
    if (q != '"' && q != '\'') return;
    for (std::size_t i = pos + 1; i < text_.size(); ++i) {
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

}  // namespace

const char* kind_text(const YNode& n) {
  switch (n.kind) {
    case YNode::Kind::kNull: return "nothing";
    case YNode::Kind::kScalar: return "a value";
    case YNode::Kind::kSeq: return "a list";
    case YNode::Kind::kMap: return "a map";
  }
  return "?";
}

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

Result<std::string> read_yaml_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  auto refuse = [&](const std::string& why) { return err(Errc::kConfig, "cannot read " + what + " '" + path + "': " + why); };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) return err(Errc::kNotFound, "cannot read " + what + " '" + path + "': " + std::strerror(e));
    return refuse(std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) return refuse("it is a directory");
  if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return refuse("it is " + std::to_string(st.st_size) + " bytes; a " + what + " may have at most " + std::to_string(max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse(std::strerror(errno));
  // Read in chunks and bounded, even if the file grows between stat and read.
  std::string text;
  char chunk[65536];
  while (text.size() <= max_bytes && in.read(chunk, sizeof chunk).gcount() > 0)
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
  if (in.bad()) return err(Errc::kIo, "cannot read " + what + " '" + path + "': read failed");
  if (text.size() > max_bytes)
    return refuse("it has more than " + std::to_string(max_bytes) + " bytes, the most a " + what + " may have");
  return text;
}

}  // namespace hpctune::config
