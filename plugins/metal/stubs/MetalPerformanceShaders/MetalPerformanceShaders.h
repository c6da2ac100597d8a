/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STUB FOR TYPE-CHECKING ONLY (scripts/metal_syntax.sh, on Linux). Not
 * Apple's header: the subset of MetalPerformanceShaders.framework
 * (MPSCoreTypes.h, MPSMatrixTypes.h, MPSMatrixMultiplication.h) that
 * plugins/metal/src uses, with Apple's names, signatures and values. On
 * macOS the plugin is built against the real SDK (scripts/build_metal.sh).
 */
#ifndef GPURT_STUB_MPS_H_
#define GPURT_STUB_MPS_H_

#import <Metal/Metal.h>

NS_ASSUME_NONNULL_BEGIN

typedef NS_ENUM(uint32_t, MPSDataType) {
  MPSDataTypeFloatBit = 0x10000000,
  MPSDataTypeFloat32 = MPSDataTypeFloatBit | 32,
  MPSDataTypeFloat16 = MPSDataTypeFloatBit | 16,
};

extern BOOL MPSSupportsMTLDevice(id<MTLDevice> _Nullable device);

@interface MPSMatrixDescriptor : NSObject
+ (MPSMatrixDescriptor *)matrixDescriptorWithRows:(NSUInteger)rows
                                          columns:(NSUInteger)columns
                                         rowBytes:(NSUInteger)rowBytes
                                         dataType:(MPSDataType)dataType;
+ (MPSMatrixDescriptor *)matrixDescriptorWithRows:(NSUInteger)rows
                                          columns:(NSUInteger)columns
                                         matrices:(NSUInteger)matrices
                                         rowBytes:(NSUInteger)rowBytes
                                      matrixBytes:(NSUInteger)matrixBytes
                                         dataType:(MPSDataType)dataType;
@end

@interface MPSMatrix : NSObject
- (instancetype)initWithBuffer:(id<MTLBuffer>)buffer
                        offset:(NSUInteger)offset
                    descriptor:(MPSMatrixDescriptor *)descriptor;
@end

/* Its superclasses (MPSMatrixBinaryKernel, MPSKernel) are left out. */
@interface MPSMatrixMultiplication : NSObject
- (instancetype)initWithDevice:(id<MTLDevice>)device
                 transposeLeft:(BOOL)transposeLeft
                transposeRight:(BOOL)transposeRight
                    resultRows:(NSUInteger)resultRows
                 resultColumns:(NSUInteger)resultColumns
               interiorColumns:(NSUInteger)interiorColumns
                         alpha:(double)alpha
                          beta:(double)beta;
- (void)encodeToCommandBuffer:(id<MTLCommandBuffer>)commandBuffer
                   leftMatrix:(MPSMatrix const *)leftMatrix
                  rightMatrix:(MPSMatrix const *)rightMatrix
                 resultMatrix:(MPSMatrix *)resultMatrix;
@end

NS_ASSUME_NONNULL_END

#endif /* GPURT_STUB_MPS_H_ */
