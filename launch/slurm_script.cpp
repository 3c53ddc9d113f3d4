// The sbatch script of `hpctune slurm submit` (see slurm_script.h).
#include "launch/slurm_script.h"

#include <cctype>
#include <cmath>

#include "common/text.h"

namespace hpctune::launch {

namespace {

// SLURM keeps the warning time of --signal in 16 bits.
constexpr int64_t kMaxSignalBefore = 65535;

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string_view::npos;
}

int64_t to_int(std::string_view s) {
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// A path an #SBATCH line can hold as it is: sbatch splits its lines at blanks, reads quotes, and
// expands % patterns in --output (%j is the only one we put there ourselves).
bool sbatch_safe_path(std::string_view path) {
  if (path.empty()) return false;
  for (char c : path) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && std::string_view("_.,:/=+@~-").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

std::string job_name_of(std::string_view name) {
  std::string out;
  for (char c : name) {
    out += std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-' ? c : '_';
  }
  return out.empty() ? "hpctune" : out;
}

void directive(std::string& out, const std::string& option, const std::string& value) {
  if (!value.empty()) out += "#SBATCH --" + option + "=" + value + "\n";
}

}  // namespace

std::optional<std::string> sbatch_value_problem(std::string_view value) {
  for (char ch : value) {
    if (std::isalnum(static_cast<unsigned char>(ch)) != 0 || std::string_view("_-.:,&|[]*=+/").find(ch) != std::string_view::npos) {
      continue;
    }
    std::string problem(1, '\'');  // built by appending: GCC 12 warns (-Wrestrict) on "'" + string
    problem.append(value).append("' holds '").append(1, ch);
    return problem.append("': only letters, digits and _-.:,&|[]*=+/ go into an sbatch option");
  }
  return std::nullopt;
}

namespace {

// The entries of a gres list that name gpu: "gpu", "gpu:4", "gpu:a100:4".
bool names_gpu(std::string_view entry) { return entry == "gpu" || entry.rfind("gpu:", 0) == 0; }

}  // namespace

std::string gres_with_gpus(const std::string& gres, int64_t gpus_per_node) {
  if (gpus_per_node <= 0) return gres;
  for (auto entry : split(gres, ',')) {
    if (names_gpu(entry)) return gres;
  }
  return (gres.empty() ? "" : gres + ",") + "gpu:" + std::to_string(gpus_per_node);
}

bool is_heterogeneous(const BatchScriptSpec& spec) {
  return !spec.master_partition.empty() || !spec.master_constraint.empty();
}

std::string slurm_log_dir(const std::string& db_path) { return db_path + ".slurm"; }

Status check_slurm_time(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return err(Errc::kUsage, "--time: '" + std::string(text) + "' " + why +
                                 " (expected minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
                                 "days-hours:minutes or days-hours:minutes:seconds, e.g. 90, 2:00:00 or 1-12)");
  };
  std::string_view clock = text;
  int64_t total = 0;
  const std::size_t dash = text.find('-');
  if (dash != std::string_view::npos) {
    const std::string_view days = text.substr(0, dash);
    clock = text.substr(dash + 1);
    if (!all_digits(days)) return bad("is not a SLURM time");
    const auto parts = split(clock, ':');
    if (parts.size() > 3) return bad("is not a SLURM time");
    for (auto p : parts) {
      if (!all_digits(p)) return bad("is not a SLURM time");
    }
    if (to_int(parts[0]) >= 24) return bad("has 24 or more hours after the day");
    for (std::size_t i = 1; i < parts.size(); ++i) {
      if (to_int(parts[i]) >= 60) return bad("has 60 or more minutes or seconds");
    }
    total = to_int(days) + to_int(parts[0]);
    for (std::size_t i = 1; i < parts.size(); ++i) total += to_int(parts[i]);
  } else {
    const auto parts = split(clock, ':');
    if (parts.size() > 3) return bad("is not a SLURM time");
    for (auto p : parts) {
      if (!all_digits(p)) return bad("is not a SLURM time");
    }
    // The first field is unbounded (minutes, or hours in h:m:s); those after a colon are not.
    for (std::size_t i = 1; i < parts.size(); ++i) {
      if (to_int(parts[i]) >= 60) return bad("has 60 or more minutes or seconds");
    }
    for (auto p : parts) total += to_int(p);
  }
  if (total == 0) return bad("is zero");
  return {};
}

int64_t nodes_per_group(int64_t ranks, int64_t ranks_per_node) {
  if (ranks < 1) ranks = 1;
  if (ranks_per_node < 1) ranks_per_node = 1;
  return (ranks + ranks_per_node - 1) / ranks_per_node;
}

int64_t nodes_needed(int64_t groups, int64_t ranks, int64_t ranks_per_node, bool heterogeneous) {
  return groups * nodes_per_group(ranks, ranks_per_node) + (heterogeneous ? 1 : 0);
}

Result<std::string> batch_script(const BatchScriptSpec& spec) {
  const bool het = is_heterogeneous(spec);
  if (!sbatch_safe_path(spec.log_dir)) {
    return err(Errc::kUsage, "the job's output directory '" + spec.log_dir +
                                 "' (the database path + .slurm) can hold only letters, digits and _.,:/=+@~- "
                                 "in an #SBATCH line: choose another --db");
  }
  if (het && spec.nodes < 2) {
    return err(Errc::kUsage, "--nodes: a heterogeneous job (resources.slurm.master) needs the master's node and at "
                             "least one more, not " + std::to_string(spec.nodes));
  }
  if (spec.signal_before_s < 1 || spec.signal_before_s > kMaxSignalBefore) {
    return err(Errc::kUsage, "resources.slurm.signal_before: " + std::to_string(spec.signal_before_s) +
                                 " s is more than SLURM's --signal can hold (1..65535 s)");
  }
  HPCTUNE_TRY(check_slurm_time(spec.time));
  for (const auto& [option, value] :
       {std::pair<const char*, const std::string*>{"partition", &spec.partition}, {"account", &spec.account},
        {"qos", &spec.qos}, {"constraint", &spec.constraint}, {"gres", &spec.gres},
        {"master partition", &spec.master_partition}, {"master constraint", &spec.master_constraint}}) {
    if (auto problem = sbatch_value_problem(*value)) return err(Errc::kUsage, std::string(option) + ": " + *problem);
  }

  std::string s = "#!/bin/bash\n";
  s += "# The batch job of campaign " + job_name_of(spec.job_name) + ", written by `hpctune slurm submit`.\n";
  s += "# The master runs on the batch host; its trainer groups are job steps in this allocation. USR1\n";
  s += "# (" + std::to_string(spec.signal_before_s) +
       " s before the time limit, or on pre-emption) reaches the master itself (exec below): it\n";
  s += "# stops dispatching, records everything" +
       std::string(spec.requeue ? " and requeues the job; the requeued job resumes the campaign.\n"
                                : "; `hpctune resume` continues the campaign later.\n");
  if (!spec.step_gpu_options.empty()) {
    s += "# Each trainer group's job step asks for its ranks' GPUs: srun " + join(spec.step_gpu_options, " ") + ".\n";
  }
  directive(s, "job-name", job_name_of(spec.job_name));
  // The options of one component: the master's node first in a heterogeneous job.
  auto component = [&](int64_t nodes, const std::string& partition, const std::string& constraint, bool gres) {
    directive(s, "nodes", std::to_string(nodes));
    directive(s, "time", spec.time);
    directive(s, "partition", partition);
    directive(s, "account", spec.account);
    directive(s, "qos", spec.qos);
    directive(s, "constraint", constraint);
    if (gres) directive(s, "gres", gres_with_gpus(spec.gres, spec.gpus_per_node));
  };
  auto job_wide = [&] {
    directive(s, "signal", "B:USR1@" + std::to_string(spec.signal_before_s));
    s += spec.requeue ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n";
    // A failed node costs its step (the trial is queued again, the node excluded), not the job.
    s += "#SBATCH --no-kill\n";
    directive(s, "output", spec.log_dir + "/slurm-%j.out");
    directive(s, "error", spec.log_dir + "/slurm-%j.err");
    directive(s, "open-mode", "append");  // a requeued job adds to its first run's output
  };
  if (het) {
    component(1, spec.master_partition.empty() ? spec.partition : spec.master_partition,
              spec.master_constraint, false);
    job_wide();
    s += "#SBATCH hetjob\n";
    component(spec.nodes - 1, spec.partition, spec.constraint, true);
  } else {
    component(spec.nodes, spec.partition, spec.constraint, true);
    job_wide();
  }
  s += "\n";
  if (!spec.setup.empty()) {
    s += "# resources.slurm.setup\n";
    for (const auto& line : spec.setup) s += line + "\n";
    s += "\n";
  }
  const std::string program = shell_quote(spec.program);
  s += "# The first run starts the campaign; a requeued job (the database exists) resumes it.\n";
  s += "db=" + shell_quote(spec.db_path) + "\n";
  s += "if [ -e \"$db\" ]; then\n";
  s += "  exec " + program + " resume \"$db\"\n";
  s += "fi\n";
  s += "exec " + program + " run " + shell_quote(spec.config_path) + " --db \"$db\"\n";
  return s;
}

}  // namespace hpctune::launch
