/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STUB FOR TYPE-CHECKING ONLY (scripts/metal_syntax.sh, on Linux). Not
 * Apple's header: a minimal subset of Foundation (and CoreFoundation's
 * bridging) declaring exactly what plugins/metal/src uses, with Apple's
 * names, signatures and types. On macOS the plugin is built against the
 * real SDK (scripts/build_metal.sh); these files are never used there.
 * A diagnostic that names this file is a gap of the stub, not of the plugin.
 */
#ifndef GPURT_STUB_FOUNDATION_H_
#define GPURT_STUB_FOUNDATION_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
/* Foundation.h includes <CoreFoundation/CoreFoundation.h>, which includes
 * the C library's headers; the plugin relies on <stdio.h> (snprintf). */
#include <stdio.h>

/* ---- NSObjCRuntime.h ---- */
typedef long NSInteger;
typedef unsigned long NSUInteger;
typedef bool BOOL; /* arm64 Darwin's BOOL */
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#define nil ((void *)0)
#define NS_ENUM(_type, _name) enum _name : _type _name; enum _name : _type
#define NS_OPTIONS(_type, _name) enum _name : _type _name; enum _name : _type
#define NS_ASSUME_NONNULL_BEGIN _Pragma("clang assume_nonnull begin")
#define NS_ASSUME_NONNULL_END _Pragma("clang assume_nonnull end")
#define NS_RETURNS_RETAINED __attribute__((ns_returns_retained))
#define NS_RETURNS_INNER_POINTER __attribute__((objc_returns_inner_pointer))
#define NS_FORMAT_FUNCTION(F, A) __attribute__((format(__NSString__, F, A)))

/* ---- CoreFoundation (CFBase.h, CFDate.h) ---- */
typedef const void *CFTypeRef;
typedef double CFTimeInterval;

#include <dispatch/dispatch.h>

NS_ASSUME_NONNULL_BEGIN

@class NSString;

/* ---- NSObject.h ---- */
@protocol NSObject
@end

@protocol NSCopying
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
- (instancetype)init;
- (id)copy;
@end

static inline CFTypeRef _Nullable CFBridgingRetain(id _Nullable X) { return (__bridge_retained CFTypeRef)X; }
static inline id _Nullable CFBridgingRelease(CFTypeRef _Nullable X) { return (__bridge_transfer id)X; }

/* ---- NSRange.h ---- */
typedef struct _NSRange {
  NSUInteger location;
  NSUInteger length;
} NSRange;
static inline NSRange NSMakeRange(NSUInteger loc, NSUInteger len) {
  NSRange r = {loc, len};
  return r;
}

/* ---- NSString.h ---- */
typedef NSUInteger NSStringEncoding;
enum { NSUTF8StringEncoding = 4 };

@interface NSString : NSObject <NSCopying>
@property (nullable, readonly) const char *UTF8String NS_RETURNS_INNER_POINTER;
- (nullable instancetype)initWithBytes:(const void *)bytes length:(NSUInteger)len encoding:(NSStringEncoding)encoding;
+ (instancetype)stringWithFormat:(NSString *)format, ... NS_FORMAT_FUNCTION(1, 2);
- (NSString *)stringByAppendingString:(NSString *)aString;
- (NSString *)stringByAppendingFormat:(NSString *)format, ... NS_FORMAT_FUNCTION(1, 2);
@end

/* ---- NSError.h ---- */
@interface NSError : NSObject
@property (readonly) NSInteger code;
@property (readonly, copy) NSString *localizedDescription;
@end

/* ---- NSEnumerator.h ---- */
typedef struct {
  unsigned long state;
  id __unsafe_unretained _Nullable *_Nullable itemsPtr;
  unsigned long *_Nullable mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;

@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState *)state
                                  objects:(id __unsafe_unretained _Nullable[_Nonnull])buffer
                                    count:(NSUInteger)len;
@end

/* ---- NSArray.h ---- */
@interface NSArray<__covariant ObjectType> : NSObject <NSFastEnumeration>
@property (readonly) NSUInteger count;
+ (instancetype)array;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)idx;
@end

@interface NSMutableArray<ObjectType> : NSArray<ObjectType>
+ (instancetype)arrayWithCapacity:(NSUInteger)numItems;
- (void)addObject:(ObjectType)anObject;
@end

/* ---- NSDictionary.h ---- */
@interface NSDictionary<__covariant KeyType, __covariant ObjectType> : NSObject
+ (instancetype)dictionary;
- (nullable ObjectType)objectForKeyedSubscript:(KeyType)key;
@end

@interface NSMutableDictionary<KeyType, ObjectType> : NSDictionary<KeyType, ObjectType>
- (void)setObject:(nullable ObjectType)obj forKeyedSubscript:(KeyType<NSCopying>)key;
@end

/* ---- NSValue.h ---- */
@interface NSNumber : NSObject <NSCopying>
+ (NSNumber *)numberWithUnsignedInt:(unsigned int)value;
+ (NSNumber *)numberWithUnsignedLong:(unsigned long)value;
+ (NSNumber *)numberWithUnsignedLongLong:(unsigned long long)value;
@property (readonly) unsigned long long unsignedLongLongValue;
@end

/* ---- NSData.h ---- */
@interface NSData : NSObject
@property (readonly) NSUInteger length;
@property (readonly) const void *bytes NS_RETURNS_INNER_POINTER;
+ (instancetype)data;
+ (instancetype)dataWithBytes:(nullable const void *)bytes length:(NSUInteger)length;
@end

@interface NSMutableData : NSData
- (void)appendBytes:(const void *)bytes length:(NSUInteger)length;
@end

/* ---- NSProcessInfo.h ---- */
typedef struct {
  NSInteger majorVersion;
  NSInteger minorVersion;
  NSInteger patchVersion;
} NSOperatingSystemVersion;

@interface NSProcessInfo : NSObject
@property (class, readonly, strong) NSProcessInfo *processInfo;
@property (readonly) NSOperatingSystemVersion operatingSystemVersion;
@end

NS_ASSUME_NONNULL_END

#endif /* GPURT_STUB_FOUNDATION_H_ */
