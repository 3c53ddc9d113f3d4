// A campaign's CURVE keys (issue 13, "Authenticated workers"): where they are kept, how the master
// loads them and how its trainer groups receive theirs.
//
// The key directory is "<database>.keys/", mode 0700, owned by the user who runs the master:
//   server.key   the master's secret key (Z85 text, 40 characters), 0600
//   worker.key   the workers' secret key, 0600: one key pair per campaign, shared by its groups
// Public keys are derived from the secret ones (zmq_curve_public), so no file can disagree with
// another. The directory is created on the first run that needs CURVE and reused by every resume,
// so a resumed campaign keeps its keys. A directory or key file with any group/other permission bit,
// not owned by this user, or that is a symbolic link is refused (kUnavailable) with its path, its
// mode and the command that fixes it.
//
// One worker key pair per campaign (not per group): the launcher hands every group the same
// environment (launch::LocalLauncherOptions::environment, which the SLURM backend passes on to its
// job steps as well), and what tells groups apart is already per launch: the credential each hello
// carries (messages.h). The transport key only decides who may talk to the master at all.
//
// Workers receive their keys in the environment, never on a command line (which every local user
// can read in `ps`): the three variables below. The worker takes them out of its environment at
// start (worker::take_worker_curve_keys), so the programs it starts do not inherit the secret.
#pragma once

#include <map>
#include <string>

#include "common/result.h"
#include "protocol/transport.h"

namespace hpctune::protocol {

// The master's public key, which the worker trusts.
inline constexpr const char* kCurveServerKeyEnv = "HPCTUNE_CURVE_SERVER_KEY";
// The worker's own key pair.
inline constexpr const char* kCurvePublicKeyEnv = "HPCTUNE_CURVE_PUBLIC_KEY";
inline constexpr const char* kCurveSecretKeyEnv = "HPCTUNE_CURVE_SECRET_KEY";
// Set to "1" when the master's transport is ZeroMQ PLAIN (resources.security none off the private
// ipc socket): the worker then sends its launch credential (kSecretEnv) as the PLAIN password.
// Not a secret itself.
inline constexpr const char* kPlainAuthEnv = "HPCTUNE_TRANSPORT_PLAIN";

struct CampaignKeys {
  CurveKeyPair server;
  CurveKeyPair worker;
};

// "<db_path>.keys".
std::string key_dir_for(const std::string& db_path);

// kUnavailable when `path` (a key directory when `directory`, else a key file) is not private to
// this user: a symbolic link, another owner, any group/other permission bit, or not a directory
// (not a regular file). Ok when it does not exist. The message names the path, its mode and the fix.
Status check_private(const std::string& path, bool directory);

// Checks an existing key directory and the key files in it (check_private); Ok when it does not
// exist. The master calls it before it opens the store, so a refused directory records nothing.
Status check_key_dir(const std::string& dir);

// The campaign's keys from `dir`, creating the directory (0700) and any missing key file (0600,
// written to a temporary file and renamed, so a crash leaves no half key) with fresh keys from
// libzmq's random source. Errors: loose permissions (check_key_dir), a key file that is not a Z85
// CURVE secret key (named), I/O.
Result<CampaignKeys> load_or_create_keys(const std::string& dir);

// The server side of a CURVE transport for these keys: only the campaign's worker key admitted.
void use_curve_server(TransportOptions& options, const CampaignKeys& keys);

// The environment a trainer group needs to connect to the master (the three variables above).
std::map<std::string, std::string> worker_key_environment(const CampaignKeys& keys);

}  // namespace hpctune::protocol
