// MpsDaemon: a private NVIDIA MPS control daemon for the trainer groups that share a GPU
// (resources.mps; the decision is scheduler/launcher_options.h's mps_control()).
//
// start() makes a fresh directory of this user's (mkdtemp under the directory the master's private
// socket would use, common/safe_open.h: private_socket_base), mode 0700, with pipe/ and log/ in it
// (0700 each, checked: owned by this user, not symbolic links), and runs `<control> -d` with
// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY set to them; `-d` returns once the daemon has
// forked, within a deadline. environment() is those two variables: every group gets them (and so
// every program a group runs), which makes their CUDA clients go through this daemon's server.
// stop() (also the destructor's, on every path that leaves the driver: the end, a failure, Ctrl-C)
// runs `echo quit | <control>` with the same variables, within a deadline, then removes the
// directory. A master that is SIGKILLed (or a second Ctrl-C) leaves the daemon running; with
// Options::campaign set, the directory's name carries a tag of the campaign
// (hpctune-mps-<tag>-XXXXXX), and the next start() for the same campaign (`hpctune resume`) first
// sends quit to every daemon such a master left (its directory passing the same checks), then
// removes that directory. By hand: `echo quit | CUDA_MPS_PIPE_DIRECTORY=<dir>/pipe
// nvidia-cuda-mps-control`.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/result.h"

namespace hpctune::launch {

inline constexpr const char* kMpsControlProgram = "nvidia-cuda-mps-control";  // found in PATH
inline constexpr const char* kMpsPipeEnv = "CUDA_MPS_PIPE_DIRECTORY";
inline constexpr const char* kMpsLogEnv = "CUDA_MPS_LOG_DIRECTORY";

class MpsDaemon {
 public:
  struct Options {
    std::string control;  // the control program (a path: find_in_path(kMpsControlProgram))
    // How long `-d` and `quit` may each take before they are killed and called failed.
    std::chrono::milliseconds deadline{std::chrono::seconds(10)};
    std::string base;  // where the private directory is made; "" = private_socket_base()
    // The campaign's identity (its database's absolute path; one master at a time holds it): tags
    // the directory so that a later master of the campaign finds daemons an earlier one left.
    std::string campaign;
    std::function<void(const std::string&)> log;  // what start() did about such daemons
  };

  // Errors: kIo when no private directory can be made (or what was made is not private), kFailed
  // when `-d` fails or outlives the deadline (its output in the message). Quit is then sent; the
  // directory is removed, unless quit failed too (the message names it and how to stop a daemon).
  static Result<std::unique_ptr<MpsDaemon>> start(const Options& options);
  ~MpsDaemon();
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  // CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY, for every group's environment.
  const std::map<std::string, std::string>& environment() const { return env_; }
  const std::string& directory() const { return dir_; }

  // Sends quit (once; later calls return Ok), then removes the directory. kFailed when quit fails
  // or outlives the deadline (the daemon may then be left running; the message says how to stop it).
  Status stop();

 private:
  explicit MpsDaemon(Options options) : opt_(std::move(options)) {}
  Status make_directories();
  // Sends quit to the daemons of directories named `prefix`XXXXXX in `base` (left by earlier masters
  // of this campaign) and removes each directory whose daemon quit or that holds no daemon's socket.
  void stop_leftovers(const std::string& base, const std::string& prefix) const;
  void remove_directories() noexcept;

  Options opt_;
  std::string dir_;
  std::map<std::string, std::string> env_;
  bool running_ = false;
};

}  // namespace hpctune::launch
