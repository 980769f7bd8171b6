/*
 * vnpu gralloc: the AIMapper v5 stable-C ABI plus the vnpu allocation entry
 * points, as exported by libvnpu_gralloc.so.
 *
 * The AIMapper part follows android/hardware/graphics/mapper/IMapper.h
 * (stable-C, version 5): same names, order, layout and error codes, so a
 * client written against IMapper.h can use this header unchanged.
 */
#ifndef VNPU_MAPPER_H
#define VNPU_MAPPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cutils/native_handle.h compatible ---------------------------------- */
#ifndef NATIVE_HANDLE_MAX_FDS
#define NATIVE_HANDLE_MAX_FDS 1024
#define NATIVE_HANDLE_MAX_INTS 1024
typedef struct native_handle {
    int version; /* sizeof(native_handle_t) == 12 */
    int numFds;
    int numInts;
    int data[]; /* numFds fds, then numInts ints */
} native_handle_t;
typedef const native_handle_t* buffer_handle_t;
#endif

/* ---- ARect --------------------------------------------------------------- */
#ifndef VNPU_HAVE_ARECT
#define VNPU_HAVE_ARECT
typedef struct ARect {
    int32_t left;
    int32_t top;
    int32_t right;
    int32_t bottom;
} ARect;
#endif

/* ---- AIMapper v5 --------------------------------------------------------- */
/* IMapper.h declares these as enums with a fixed underlying type; plain
 * typedefs keep the same size and values in C11. */
typedef int32_t AIMapper_Error;
enum {
    AIMAPPER_ERROR_NONE = 0,
    AIMAPPER_ERROR_BAD_DESCRIPTOR = 1,
    AIMAPPER_ERROR_BAD_BUFFER = 2,
    AIMAPPER_ERROR_BAD_VALUE = 3,
    AIMAPPER_ERROR_NO_RESOURCES = 5,
    AIMAPPER_ERROR_UNSUPPORTED = 7,
};

typedef uint32_t AIMapper_Version;
enum { AIMAPPER_VERSION_5 = 5 };

#ifdef __cplusplus
#define VNPU_ALIGN_MAX alignas(alignof(max_align_t))
#else
#define VNPU_ALIGN_MAX _Alignas(max_align_t)
#endif

typedef struct AIMapper_MetadataType {
    const char* name;
    int64_t value;
} AIMapper_MetadataType;

typedef struct AIMapper_MetadataTypeDescription {
    AIMapper_MetadataType metadataType;
    const char* description; /* NULL for standard types */
    bool isGettable;
    bool isSettable;
    uint8_t reserved[32];
} AIMapper_MetadataTypeDescription;

typedef void (*AIMapper_DumpBufferCallback)(void* context, AIMapper_MetadataType metadataType,
                                            const void* value, size_t valueSize);
typedef void (*AIMapper_BeginDumpBufferCallback)(void* context);

typedef struct AIMapperV5 {
    AIMapper_Error (*importBuffer)(const native_handle_t* handle, buffer_handle_t* outBufferHandle);
    AIMapper_Error (*freeBuffer)(buffer_handle_t buffer);
    AIMapper_Error (*getTransportSize)(buffer_handle_t buffer, uint32_t* outNumFds,
                                       uint32_t* outNumInts);
    AIMapper_Error (*lock)(buffer_handle_t buffer, uint64_t cpuUsage, ARect accessRegion,
                           int acquireFence, void** outData);
    AIMapper_Error (*unlock)(buffer_handle_t buffer, int* releaseFence);
    AIMapper_Error (*flushLockedBuffer)(buffer_handle_t buffer);
    AIMapper_Error (*rereadLockedBuffer)(buffer_handle_t buffer);
    int32_t (*getMetadata)(buffer_handle_t buffer, AIMapper_MetadataType metadataType,
                           void* destBuffer, size_t destBufferSize);
    int32_t (*getStandardMetadata)(buffer_handle_t buffer, int64_t standardMetadataType,
                                   void* destBuffer, size_t destBufferSize);
    AIMapper_Error (*setMetadata)(buffer_handle_t buffer, AIMapper_MetadataType metadataType,
                                  const void* metadata, size_t metadataSize);
    AIMapper_Error (*setStandardMetadata)(buffer_handle_t buffer, int64_t standardMetadataType,
                                          const void* metadata, size_t metadataSize);
    AIMapper_Error (*listSupportedMetadataTypes)(
            const AIMapper_MetadataTypeDescription** outDescriptionList,
            size_t* outNumberOfDescriptions);
    AIMapper_Error (*dumpBuffer)(buffer_handle_t buffer,
                                 AIMapper_DumpBufferCallback dumpBufferCallback, void* context);
    AIMapper_Error (*dumpAllBuffers)(AIMapper_BeginDumpBufferCallback beginDumpCallback,
                                     AIMapper_DumpBufferCallback dumpBufferCallback,
                                     void* context);
    AIMapper_Error (*getReservedRegion)(buffer_handle_t buffer, void** outReservedRegion,
                                        uint64_t* outReservedSize);
} AIMapperV5;

typedef struct AIMapper {
    VNPU_ALIGN_MAX AIMapper_Version version;
    AIMapperV5 v5;
} AIMapper;

/* Exported by the library. */
AIMapper_Error AIMapper_loadIMapper(AIMapper** outImplementation);
extern const uint32_t ANDROID_HAL_MAPPER_VERSION;  /* == 5 */
extern const uint32_t ANDROID_HAL_STABLEC_VERSION; /* == 5 */

/* ---- vnpu allocator ------------------------------------------------------ */
typedef struct VnpuBufferDescriptorInfo {
    char name[128]; /* name[127] is treated as NUL */
    int32_t width;
    int32_t height;
    int32_t layerCount;
    int32_t format;   /* android PixelFormat */
    uint64_t usage;   /* android BufferUsage */
    int64_t reservedSize;
} VnpuBufferDescriptorInfo;

/* Allocates `count` buffers: writes the stride (pixels) and `count` raw
 * handles (owned by the caller; release with vnpu_native_handle_delete).
 * Returns AIMAPPER_ERROR_NONE, BAD_DESCRIPTOR, UNSUPPORTED or NO_RESOURCES
 * (BAD_VALUE for null pointers). */
AIMapper_Error vnpu_gralloc_allocate(const VnpuBufferDescriptorInfo* info, uint32_t count,
                                     uint32_t* outStride, native_handle_t** outHandles);
bool vnpu_gralloc_is_supported(const VnpuBufferDescriptorInfo* info);
/* Closes the fds of a raw handle from vnpu_gralloc_allocate and frees it. */
void vnpu_native_handle_delete(native_handle_t* handle);

/* Standard metadata type namespace and vendor namespace. */
#define VNPU_STANDARD_METADATA_TYPE "android.hardware.graphics.common.StandardMetadataType"
#define VNPU_VENDOR_METADATA_TYPE "com.vnpu.graphics.gralloc.MetadataType"
#define VNPU_METADATA_ALLOCATOR_PID 1
#define VNPU_METADATA_USER_DATA 2

#ifdef __cplusplus
}
#endif

#endif /* VNPU_MAPPER_H */
