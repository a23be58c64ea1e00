// The coordinator's clock is the project's: runtime/clock.h. This header stays for the
// callers outside coordinator/ (cli/ tests, bench/) until they include that one.
#ifndef ECPS_COORDINATOR_CLOCK_H_
#define ECPS_COORDINATOR_CLOCK_H_

#include "runtime/clock.h"

#endif  // ECPS_COORDINATOR_CLOCK_H_
