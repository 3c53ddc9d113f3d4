// hpctune_simulate's public header (`hpctune simulate`, issue 24; its own folder since issue 36):
// the campaign simulator (simulator.h: simulate_campaign, the real master on a simulated clock),
// the cost model of a simulated step (cost_model.h), where simulated outcomes come from
// (outcomes.h: the caller's `function` model, replay or surrogate of a recorded campaign), and the
// fit of a machine file from small real campaigns (calibration.h). The CLI glue (arguments, tables,
// the calibration's child processes) stays in cli/; bench/scale's --simulated mode runs the same
// campaign through simulate_campaign.
#pragma once

#include "simulate/calibration.h"
#include "simulate/cost_model.h"
#include "simulate/outcomes.h"
#include "simulate/simulator.h"
