/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STUB FOR TYPE-CHECKING ONLY (scripts/metal_syntax.sh, on Linux). Not
 * Apple's header: a minimal subset of Metal.framework declaring exactly
 * what plugins/metal/src uses (types, protocols with the methods and
 * properties used, enums and constants), with Apple's names, signatures,
 * types and values (the macOS 11 SDK's MTLArgument reflection included;
 * an enum lists only the enumerators used).
 * On macOS the plugin is built against the real SDK (scripts/build_metal.sh).
 * A diagnostic that names this file is a gap of the stub, not of the plugin.
 */
#ifndef GPURT_STUB_METAL_H_
#define GPURT_STUB_METAL_H_

#import <Foundation/Foundation.h>

NS_ASSUME_NONNULL_BEGIN

@protocol MTLDevice;
@protocol MTLCommandBuffer;

/* ---- MTLTypes.h ---- */
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

/* ---- MTLResource.h ---- */
typedef NS_ENUM(NSUInteger, MTLStorageMode) { MTLStorageModeShared = 0 };
typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) { MTLHazardTrackingModeTracked = 2 };
#define MTLResourceStorageModeShift 4
#define MTLResourceHazardTrackingModeShift 8
typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
  MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
  MTLResourceHazardTrackingModeTracked = MTLHazardTrackingModeTracked << MTLResourceHazardTrackingModeShift,
};

@protocol MTLResource <NSObject>
@end

/* ---- MTLBuffer.h ---- */
@protocol MTLBuffer <MTLResource>
- (void *)contents NS_RETURNS_INNER_POINTER;
@end

/* ---- MTLEvent.h ---- */
@protocol MTLEvent <NSObject>
@end
@protocol MTLSharedEvent <MTLEvent>
@property (readwrite) uint64_t signaledValue;
@end

/* ---- MTLArgument.h ---- */
typedef NS_ENUM(NSUInteger, MTLArgumentType) {
  MTLArgumentTypeBuffer = 0,
  MTLArgumentTypeThreadgroupMemory = 1,
};
typedef NS_ENUM(NSUInteger, MTLArgumentAccess) {
  MTLArgumentAccessReadOnly = 0,
};
@interface MTLArgument : NSObject
@property (readonly) NSString *name;
@property (readonly) MTLArgumentType type;
@property (readonly) MTLArgumentAccess access;
@property (readonly) NSUInteger index;
@property (readonly, getter=isActive) BOOL active;
@property (readonly) NSUInteger bufferDataSize;
@end

/* ---- MTLLibrary.h ---- */
typedef NS_ENUM(NSUInteger, MTLFunctionType) {
  MTLFunctionTypeKernel = 3,
};
@protocol MTLFunction <NSObject>
@property (readonly) MTLFunctionType functionType;
@end
@interface MTLCompileOptions : NSObject
@property (readwrite, nonatomic) BOOL fastMathEnabled;
@end
@protocol MTLLibrary <NSObject>
- (nullable id<MTLFunction>)newFunctionWithName:(NSString *)functionName;
@end

/* ---- MTLComputePipeline.h ---- */
@interface MTLComputePipelineReflection : NSObject
@property (readonly) NSArray<MTLArgument *> *arguments;
@end
@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property (readonly) NSUInteger staticThreadgroupMemoryLength;
@end

/* ---- MTLCommandEncoder.h, MTLComputeCommandEncoder.h, MTLBlitCommandEncoder.h ---- */
@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end
@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(nullable id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end
@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
@end

/* ---- MTLCommandBuffer.h ---- */
typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};
typedef NS_ENUM(NSUInteger, MTLCommandBufferError) {
  MTLCommandBufferErrorDeviceRemoved = 11,
};
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);
@protocol MTLCommandBuffer <NSObject>
@property (nullable, copy, atomic) NSString *label;
@property (readonly) MTLCommandBufferStatus status;
@property (nullable, readonly) NSError *error;
@property (readonly) CFTimeInterval GPUStartTime;
@property (readonly) CFTimeInterval GPUEndTime;
- (void)commit;
- (void)waitUntilCompleted;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value;
@end

/* ---- MTLCommandQueue.h ---- */
@protocol MTLCommandQueue <NSObject>
@property (nullable, copy, atomic) NSString *label;
- (nullable id<MTLCommandBuffer>)commandBuffer;
@end

/* ---- MTLDevice.h ---- */
typedef NS_ENUM(NSInteger, MTLGPUFamily) {
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyMac2 = 2002,
};
typedef NS_OPTIONS(NSUInteger, MTLPipelineOption) {
  MTLPipelineOptionArgumentInfo = 1 << 0,
};
typedef __autoreleasing MTLComputePipelineReflection *_Nullable MTLAutoreleasedComputePipelineReflection;

@protocol MTLDevice <NSObject>
@property (readonly) NSString *name;
@property (readonly) uint64_t registryID;
@property (readonly) MTLSize maxThreadsPerThreadgroup;
@property (readonly) NSUInteger maxThreadgroupMemoryLength;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
@property (readonly) NSUInteger currentAllocatedSize;
@property (readonly) BOOL hasUnifiedMemory;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (nullable id<MTLCommandQueue>)newCommandQueue;
- (nullable id<MTLSharedEvent>)newSharedEvent;
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (nullable id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer
                                            length:(NSUInteger)length
                                           options:(MTLResourceOptions)options
                                       deallocator:(void (^_Nullable)(void *pointer, NSUInteger length))deallocator;
- (nullable id<MTLLibrary>)newLibraryWithData:(dispatch_data_t)data error:(__autoreleasing NSError **)error;
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString *)source
                                        options:(nullable MTLCompileOptions *)options
                                          error:(__autoreleasing NSError **)error;
- (nullable id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                                      error:(__autoreleasing NSError **)error;
- (nullable id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                                    options:(MTLPipelineOption)options
                                                                 reflection:(MTLAutoreleasedComputePipelineReflection *_Nullable)reflection
                                                                      error:(__autoreleasing NSError **)error;
@end

extern id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void) NS_RETURNS_RETAINED;
extern NSArray<id<MTLDevice>> *MTLCopyAllDevices(void) NS_RETURNS_RETAINED;

NS_ASSUME_NONNULL_END

#endif /* GPURT_STUB_METAL_H_ */
