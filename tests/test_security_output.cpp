// Issue 21, finding 8 (the output part): one CSV writer for `trials`/`export --format csv` and the
// dashboard, with the formula guard, '\r' and ';' quoted, read back by python3's csv module; and a
// trainer's terminal escapes shown escaped by `run`, `status` and `trial`.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/text.h"
#include "dashboard/api.h"
#include "report/csv.h"
#include "tests/campaign_fixture.h"
#include "tests/synthetic_campaign.h"

using namespace hpctune;
using namespace hpctune::testing;
using json = nlohmann::json;

namespace {

// The rows of a CSV file as python3's csv module reads them (each row a list of cells).
json python_csv_rows(const TempDir& dir, const std::string& path) {
  const std::string out = path + ".json";
  launch::SpawnOptions o;
  o.argv = {"/usr/bin/python3", "-c",
            "import csv, json, sys\n"
            "with open(sys.argv[1], newline='') as f: rows = list(csv.reader(f, strict=True))\n"
            "json.dump(rows, open(sys.argv[2], 'w'))\n",
            path, out};
  o.stdout_path = dir.file("python.log");
  o.stderr_path = "=stdout";
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  REQUIRE_MESSAGE(status->code == 0, read_file(dir.file("python.log")));
  return json::parse(read_file(out));
}

// The hostile trial's values and what a spreadsheet-safe CSV must read back as.
const json kHostileParams = {{"formula", "=1+1"},        {"cr", "a\rb"},      {"semi", "a;=1+1"},
                             {"newline", "x\ny"},        {"quote", "say \"hi\""}, {"negative", -0.5},
                             {"negative_text", "-0.5"}, {"at", "@SUM(A1)"},   {"tab", "\tx"},
                             {"comma", "a,b"}};
const json kExpected = {{"params.formula", "'=1+1"},      {"params.cr", "a\rb"},          {"params.semi", "a;'=1+1"},
                        {"params.newline", "x\ny"},       {"params.quote", "say \"hi\""}, {"params.negative", "-0.5"},
                        {"params.negative_text", "-0.5"}, {"params.at", "'@SUM(A1)"},     {"params.tab", "'\tx"},
                        {"params.comma", "a,b"},          {"error", "'=HYPERLINK(\"http://x\")\r\nline 2"}};

// Checks the rows: every trial one row of the header's width; the hostile one's cells as expected.
void check_rows(const json& rows, std::size_t trials, int64_t hostile_id) {
  REQUIRE(rows.size() == trials + 1);
  const json& header = rows[0];
  for (const auto& r : rows) CHECK(r.size() == header.size());
  CHECK(header[0] == "trial");
  auto column = [&](const std::string& name) -> std::size_t {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i].get<std::string>() == name) return i;
    }
    return header.size();
  };
  CHECK(column("params.formula") < header.size());
  for (const auto& h : header) CHECK(h.get<std::string>().rfind("param.", 0) != 0);  // `params.`, as the dashboard
  const json* row = nullptr;
  for (const auto& r : rows) {
    if (r[0] == std::to_string(hostile_id)) row = &r;
  }
  REQUIRE(row != nullptr);
  for (auto it = kExpected.begin(); it != kExpected.end(); ++it) {
    CAPTURE(it.key());
    const std::size_t col = column(it.key());
    REQUIRE(col < header.size());
    CHECK((*row)[col] == it.value());
  }
}

}  // namespace

TEST_CASE("CSV cells: formulas defused, numbers kept, \\r ; , \" and line breaks quoted") {
  CHECK(report::csv_field("=1+1") == "'=1+1");
  CHECK(report::csv_field("@SUM(A1)") == "'@SUM(A1)");
  CHECK(report::csv_field("+cmd") == "'+cmd");
  CHECK(report::csv_field("-cmd") == "'-cmd");
  CHECK(report::csv_field("\tx") == "'\tx");
  CHECK(report::csv_field("\rx") == "\"'\rx\"");
  CHECK(report::csv_field("a\rb") == "\"a\rb\"");  // a bare CR would start a new row
  CHECK(report::csv_field("a;=1+1") == "\"a;'=1+1\"");  // ';'-separated locales split it there
  CHECK(report::csv_field("a;b") == "\"a;b\"");
  CHECK(report::csv_field("a,b") == "\"a,b\"");
  CHECK(report::csv_field("a\"b") == "\"a\"\"b\"");
  CHECK(report::csv_field("x\ny") == "\"x\ny\"");
  CHECK(report::csv_field("plain") == "plain");
  // A number stays a number, as text or as a value.
  CHECK(report::csv_field("-0.5") == "-0.5");
  CHECK(report::csv_field("+3") == "+3");
  CHECK(report::csv_field("-1e-3") == "-1e-3");
  CHECK(report::csv_field("-1-1") == "'-1-1");
  CHECK(report::csv_value(json(-0.5)) == "-0.5");
  CHECK(report::csv_value(json(-3)) == "-3");
  CHECK(report::csv_value(json("=x")) == "'=x");
  CHECK(report::csv_value(json::array({"=x"})) == "\"[\"\"=x\"\"]\"");  // JSON, starting with [
  CHECK(report::csv_number(std::nan("")) == "");
}

TEST_CASE("CSV: the dashboard page's table export (dom.js csvCell) writes cells as the server's writer does") {
  TempDir dir;
  const json cases = {"=1+1", "a;=1+1", "-0.5", "+3", "-1-1", "a\rb", "x\ny", "say \"hi\"", "\tx", "@SUM(A1)", "a,b", "a;b", "plain", ""};
  const std::string cases_file = dir.write("cases.json", cases.dump());
  launch::SpawnOptions o;
  o.argv = {"node", "--input-type=module", "-e",
            "import {csvCell} from 'file://" + std::string(HPCTUNE_SOURCE_DIR) + "/dashboard/web/src/dom.js';\n"
            "import {readFileSync} from 'node:fs';\n"
            "const cases = JSON.parse(readFileSync(process.argv[1], 'utf8'));\n"
            "console.log(JSON.stringify(cases.map(csvCell)));\n",
            cases_file};
  o.stdout_path = dir.file("node.out");
  o.stderr_path = dir.file("node.err");
  auto child = launch::ChildProcess::spawn(o);
  REQUIRE(child.ok());
  auto status = child->wait_for(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  REQUIRE_MESSAGE(status->code == 0, read_file(dir.file("node.err")));
  const json cells = json::parse(read_file(dir.file("node.out")));
  REQUIRE(cells.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i]);
    CHECK(cells[i] == report::csv_field(cases[i].get<std::string>()));
  }
}

TEST_CASE("CSV: trials, export and the dashboard write the same guarded table, read back whole by python3") {
  TempDir dir;
  testing::SyntheticOptions o;
  o.name = "csv";
  o.running = 1;
  const std::string db = dir.file("csv.db");
  REQUIRE(testing::make_synthetic_campaign(db, 12, 2, 5, o).ok());
  int64_t hostile = 0;
  {
    auto w = store::Store::open(db);
    REQUIRE(w.ok());
    store::TrialRow t;
    t.campaign_id = 1;
    t.seq = 1000;
    t.params = kHostileParams;
    t.created_at = unix_now();
    t.state = store::TrialState::kFailed;
    t.error = "=HYPERLINK(\"http://x\")\r\nline 2";
    auto id = (*w)->insert_trial(t);
    REQUIRE(id.ok());
    hostile = *id;
  }
  constexpr std::size_t kTrials = 13;

  auto trials = run_hpctune({"trials", db, "--format", "csv"}, dir.file("trials.csv"));
  REQUIRE(trials.code == 0);
  auto exported = run_hpctune({"export", db, "--format", "csv", "-o", dir.file("export.csv")}, dir.file("export.log"));
  REQUIRE(exported.code == 0);
  dashboard::Api api({db});
  auto r = api.get("/api/campaigns/0/trials", {{"format", "csv"}, {"sort", "trial"}});
  REQUIRE(r.status == 200);
  const std::string served = dir.write("dashboard.csv", r.text);

  const json a = python_csv_rows(dir, dir.file("trials.csv"));
  const json b = python_csv_rows(dir, dir.file("export.csv"));
  const json c = python_csv_rows(dir, served);
  check_rows(a, kTrials, hostile);
  check_rows(b, kTrials, hostile);
  check_rows(c, kTrials, hostile);
  CHECK(a[0] == c[0]);  // one writer: the same columns
  CHECK(b[0] == c[0]);
}

TEST_CASE("a trainer's terminal escapes: run, status and trial print no raw ESC") {
  TempDir dir;
  // k=1 succeeds with a metric whose name clears the screen; k=0 fails with a fake "all ok" on a
  // cleared screen in its stderr and its error.
  const std::string script = dir.write("esc.sh",
                                       "if [ \"$1\" = 1 ]; then\n"
                                       "  printf 'hpctune-report {\"step\": 1, \"v\": 1, \"\\\\u001b[2Jall ok\": 2}\\n'\n"
                                       "  exit 0\n"
                                       "fi\n"
                                       "printf '\\033[2J\\033[H\\033[32mall ok\\033[0m\\rX\\n' >&2\n"
                                       "exit 1\n");
  const std::string cfg = dir.write("esc.yaml", "name: esc\nobjective: {metric: v, mode: max}\n"
                                                "search: {algorithm: grid, max_trials: 2}\n"
                                                "space:\n  k: {type: choice, values: [0, 1]}\n"
                                                "trainer:\n  kind: command\n  command: sh " +
                                                    script + " {k}\n  timeout: 30\n"
                                                             "resources: {groups: 1}\n");
  const std::string db = dir.file("esc.db");
  auto run = run_hpctune({"run", cfg, "--db", db}, dir.file("run.log"));
  CHECK(run.code == 0);  // one trial done
  const std::string run_log = read_file(dir.file("run.log"));
  CAPTURE(run_log);
  const auto rows = read_trials(db);
  REQUIRE(rows.size() == 2);
  int64_t failed = 0;
  for (const auto& t : rows) {
    if (t.state == store::TrialState::kFailed) failed = t.id;
  }
  REQUIRE(failed != 0);
  CHECK(run_log.find("\\x1b[2J") != std::string::npos);  // shown, escaped
  CHECK(run_log.find('\x1b') == std::string::npos);

  auto status = run_hpctune({"status", db}, dir.file("status.log"));
  CHECK(status.code == 0);
  const std::string status_out = read_file(dir.file("status.log"));
  CAPTURE(status_out);
  CHECK(status_out.find("\\x1b[2Jall ok") != std::string::npos);
  CHECK(status_out.find('\x1b') == std::string::npos);

  for (const auto& t : rows) {
    auto trial = run_hpctune({"trial", db, std::to_string(t.id)}, dir.file("trial.log"));
    CHECK(trial.code == 0);
    const std::string trial_out = read_file(dir.file("trial.log"));
    CAPTURE(trial_out);
    CHECK(trial_out.find('\x1b') == std::string::npos);
    CHECK(trial_out.find('\r') == std::string::npos);
    if (t.id == failed) CHECK(trial_out.find("\\x1b[32mall ok\\x1b[0m\\rX") != std::string::npos);
  }
}

TEST_CASE("a usage error quoting the value given prints no raw ESC (CLI11's messages are escaped too)") {
  // Before, `status DB --format $'\e[2J...'` had CLI11 print "--format: <ESC>[2J... not in {table,json}"
  // as it was: the value's escapes reached the terminal (exit 2 all the same).
  TempDir dir;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status", dir.file("x.db"), "--format", "\x1b[2J\x1b[Hall ok"},
        {"export", dir.file("x.db"), "--format", "csv\x07\x1b]0;title\x07"}, {"trials", dir.file("x.db"), "--nope\x1b[2J"}}) {
    CAPTURE(args[0]);
    auto st = run_hpctune(args, dir.file("usage.log"));
    const std::string out = read_file(dir.file("usage.log"));
    CHECK_MESSAGE(st.code == 2, out);
    CHECK_MESSAGE(out.find('\x1b') == std::string::npos, out);
    CHECK_MESSAGE(out.find('\x07') == std::string::npos, out);
    const bool shown = out.find("\\x1b[2J") != std::string::npos || out.find("\\x1b]0;title") != std::string::npos;
    CHECK_MESSAGE(shown, out);  // escaped, not dropped
  }
}
