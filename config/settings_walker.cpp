// The settings walker (settings_walker.h): a YAML tree walked against the settings table into JSON,
// with the messages for unknown, out-of-scope, missing and invalid keys.
#include "config/settings_walker.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <string_view>

#include "common/settings.h"

namespace hpctune::config {

using nlohmann::json;

namespace {

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

// [-+]digits: an integer as written, whatever its size.
bool is_integer_literal(const std::string& text) {
  std::size_t i = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return i < text.size() && std::all_of(text.begin() + static_cast<std::ptrdiff_t>(i), text.end(),
                                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

std::string child_of(const std::string& pattern, const std::string& key) {
  return pattern.empty() ? key : pattern + "." + key;
}

std::string shown(const YNode& n) {
  if (n.kind == YNode::Kind::kScalar) return n.quoted ? "\"" + n.text + "\"" : "'" + n.text + "'";
  return kind_text(n);
}

bool valid_param_name(const std::string& name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

// Is `leaf` of section `pattern` a selector of some scope?
bool is_selector(const std::string& pattern, std::string_view leaf) {
  const std::string full = pattern.empty() ? std::string(leaf) : pattern + "." + std::string(leaf);
  for (const auto& s : settings())
    if (s.scope.key == full || s.closed_when.key == full) return true;
  return false;
}

}  // namespace

bool is_numeric_type(Type t) { return t == Type::kInt || t == Type::kNumber || t == Type::kDuration; }

// `rename` maps a key path to the one the user sees: a stage's own keys are walked as the top
// level's ("search.max_trials") and named as written ("stages[1].search.max_trials").
Error Walker::fail(Mark mark, const std::string& path, const std::string& what) const {
  std::string message = source_ + ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column) + ": ";
  if (!path.empty()) message += (rename_ ? rename_(path) : path) + ": ";
  return err(Errc::kConfig, message + what);
}

// The mark of the key at `path`, or of the closest enclosing key that was given.
Mark Walker::mark_of(std::string path) const {
  while (true) {
    auto it = marks_.find(path);
    if (it != marks_.end()) return it->second;
    const auto cut = path.find_last_of(".[");
    if (cut == std::string::npos || cut == 0) return Mark{};
    path.resize(cut);
  }
}

// The value at `path` as written in the file (a plain scalar), else `otherwise`.
std::string Walker::text_of(const std::string& path, std::string otherwise) const {
  auto it = texts_.find(path);
  return it != texts_.end() ? it->second : otherwise;
}

// Walks a section (a map of declared keys) into `out`. `pattern` is its table path ("" for the
// top level, "space.*"), `path` its concrete path ("space.lr"), `where` the mark of its key
// (where a missing key is reported).
Status Walker::section(const YNode* node, const std::string& pattern, const std::string& path, Mark where, json& out,
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

Status Walker::space(const YNode& node, const std::string& path, Mark where, json& out) {
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

// The value of the selector `selector_pattern` ("trainer.kind", "space.*.type") in the walk so far.
std::optional<std::string> Walker::selector_value(const std::string& selector_pattern) const {
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

bool Walker::active(const Setting& s) const {
  if (s.scope.always()) return true;
  const auto value = selector_value(s.scope.key);
  return value && s.scope.contains(*value);
}

const Setting* Walker::active_of(const std::vector<const Setting*>& decls) const {
  for (const auto* d : decls)
    if (active(*d)) return d;
  return nullptr;
}

Status Walker::section_body(const YNode* node, const std::string& pattern, const std::string& path, Mark where, json& out,
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

Status Walker::fill_default(const Setting& s, const std::string& path, Mark where, json& out) {
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

Status Walker::missing(const Setting& s, const std::string& path, Mark where) const {
  const std::string what = s.type == Type::kEnum ? "one of " + join(s.choices, ", ") : first_sentence(s.help);
  return fail(where, path, "missing required key (" + what + ")");
}

bool Walker::active_scope(const Scope& scope) const {
  const auto value = selector_value(scope.key);
  return value && scope.contains(*value);
}

Status Walker::unknown_key(const YEntry& e, const std::string& pattern, const std::string& path,
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

Status Walker::out_of_scope(const YEntry& e, const std::string& path, const std::vector<const Setting*>& decls) const {
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
Status Walker::value(const Setting& s, const YNode& node, const std::string& path, Mark key_mark, json& out) {
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
  // A command as a list: each item its text (an argv: `2` is the argument "2"), each with its place.
  if (s.type == Type::kCommandLine && node.kind == YNode::Kind::kSeq) {
    out = json::array();
    for (std::size_t i = 0; i < node.items.size(); ++i) {
      const YNode& item = node.items[i];
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      marks_[item_path] = item.mark;
      if (item.kind != YNode::Kind::kScalar)
        return fail(item.mark, item_path, std::string("expected a string (one argument), got ") + kind_text(item));
      out.push_back(item.text);
    }
    if (out.empty()) return fail(node.mark, path, "the list is empty; give the program and its arguments");
    return Status::Ok();
  }
  // A list given to a key of any value (resources.gpus): its items' places, for the checks' messages.
  if (s.type == Type::kValue && node.kind == YNode::Kind::kSeq)
    for (std::size_t i = 0; i < node.items.size(); ++i) marks_[path + "[" + std::to_string(i) + "]"] = node.items[i].mark;
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

Status Walker::leaf(const Setting& s, const YNode& node, const std::string& path, Mark mark, json& out) {
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
      if (!plain.is_string() && !plain.is_null()) {
        what += node.str_tag ? " (it is tagged !!str, so it is a string; remove the tag)"
                             : " (it is quoted, so it is a string; remove the quotes)";
      }
    }
    return fail(mark, path, what);
  }
  if (s.type == Type::kString && s.required && checked.value().get<std::string>().empty())
    return fail(mark, path, "must not be empty");
  if (node.kind == YNode::Kind::kScalar && !node.quoted && is_numeric_type(s.type)) texts_[path] = node.text;
  out = std::move(checked).value();
  return Status::Ok();
}

}  // namespace hpctune::config
