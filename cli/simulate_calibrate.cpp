#include "cli/simulate_command.h"

namespace hpctune::cli {

Status cmd_simulate_calibrate(const SimulateArgs&) { return err(Errc::kUsage, "--calibrate: not yet"); }

}  // namespace hpctune::cli
