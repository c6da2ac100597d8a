/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STUB FOR TYPE-CHECKING ONLY (scripts/metal_syntax.sh, on Linux). Not
 * Apple's header: the subset of libdispatch (dispatch/data.h, with
 * OS_OBJECT_USE_OBJC as under ARC) that plugins/metal/src uses, with
 * Apple's names and signatures. On macOS the real SDK is used.
 */
#ifndef GPURT_STUB_DISPATCH_H_
#define GPURT_STUB_DISPATCH_H_

#include <stddef.h>

@protocol NSObject;
@class NSObject;

typedef void (^dispatch_block_t)(void);

@protocol OS_dispatch_object <NSObject>
@end
@protocol OS_dispatch_queue <OS_dispatch_object>
@end
@protocol OS_dispatch_data <OS_dispatch_object>
@end
typedef NSObject<OS_dispatch_queue> *dispatch_queue_t;
typedef NSObject<OS_dispatch_data> *dispatch_data_t;

#define DISPATCH_DATA_DESTRUCTOR_DEFAULT NULL

__attribute__((ns_returns_retained)) dispatch_data_t _Nonnull dispatch_data_create(
    const void *_Nonnull buffer, size_t size, dispatch_queue_t _Nullable queue, dispatch_block_t _Nullable destructor);

#endif /* GPURT_STUB_DISPATCH_H_ */
