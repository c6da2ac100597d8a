/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STUB FOR TYPE-CHECKING ONLY (scripts/metal_syntax.sh, on Linux). Not
 * Apple's header: the subset of <mach/mach_time.h> that plugins/metal/src
 * uses, with Apple's names and signatures. On macOS the real SDK is used.
 */
#ifndef GPURT_STUB_MACH_TIME_H_
#define GPURT_STUB_MACH_TIME_H_

#include <stdint.h>

typedef int kern_return_t;

struct mach_timebase_info {
  uint32_t numer;
  uint32_t denom;
};
typedef struct mach_timebase_info *mach_timebase_info_t;
typedef struct mach_timebase_info mach_timebase_info_data_t;

kern_return_t mach_timebase_info(mach_timebase_info_t info);
uint64_t mach_absolute_time(void);

#endif /* GPURT_STUB_MACH_TIME_H_ */
