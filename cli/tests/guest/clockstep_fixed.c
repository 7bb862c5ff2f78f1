/* clockstep.c with its bug fixed: the lease is kept on the monotonic
 * clock, which no wall-clock step moves (`hvsim retest` tests it). */
#define LEASE_CLOCK CLOCK_MONOTONIC
#include "clockstep.c"
