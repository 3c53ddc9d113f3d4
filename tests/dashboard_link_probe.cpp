// A program linked with hpctune_dashboard alone, never run by ctest: test_master_links reads its
// link line to check that the read-only dashboard (and report/ under it) links no scheduler,
// launcher, protocol or ZeroMQ. It exits 0 when the web app's index is embedded.
#include "dashboard/assets.h"

int main() { return hpctune::dashboard::asset("index.html") ? 0 : 1; }
