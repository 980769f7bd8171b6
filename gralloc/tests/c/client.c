/* A small C client of libvnpu_gralloc.so: dlopen, load the AIMapper table,
 * and run allocate -> import -> lock -> write -> unlock -> metadata get/set
 * -> free through it. Exit status 0 and "C ABI OK" on success. */
#include "vnpu_mapper.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c)                                                                \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);        \
            return 1;                                                           \
        }                                                                       \
    } while (0)

static const char kStd[] = VNPU_STANDARD_METADATA_TYPE;

/* Encodes the standard header + an int32 payload; returns the size. */
static size_t encode_i32(uint8_t* out, int64_t type, int32_t value) {
    int64_t len = (int64_t)strlen(kStd);
    size_t o = 0;
    memcpy(out + o, &len, 8); o += 8;
    memcpy(out + o, kStd, (size_t)len); o += (size_t)len;
    memcpy(out + o, &type, 8); o += 8;
    memcpy(out + o, &value, 4); o += 4;
    return o;
}

int main(int argc, char** argv) {
    CHECK(argc == 2);
    void* so = dlopen(argv[1], RTLD_LOCAL | RTLD_NOW);
    if (!so) fprintf(stderr, "dlopen: %s\n", dlerror());
    CHECK(so != NULL);

    AIMapper_Error (*load)(AIMapper**) = (AIMapper_Error(*)(AIMapper**))dlsym(so, "AIMapper_loadIMapper");
    const uint32_t* mv = (const uint32_t*)dlsym(so, "ANDROID_HAL_MAPPER_VERSION");
    const uint32_t* sv = (const uint32_t*)dlsym(so, "ANDROID_HAL_STABLEC_VERSION");
    AIMapper_Error (*alloc)(const VnpuBufferDescriptorInfo*, uint32_t, uint32_t*, native_handle_t**) =
            (AIMapper_Error(*)(const VnpuBufferDescriptorInfo*, uint32_t, uint32_t*, native_handle_t**))dlsym(
                    so, "vnpu_gralloc_allocate");
    void (*del)(native_handle_t*) = (void (*)(native_handle_t*))dlsym(so, "vnpu_native_handle_delete");
    CHECK(load && mv && sv && alloc && del);
    CHECK(*mv == 5 && *sv == 5);
    CHECK(load(NULL) == AIMAPPER_ERROR_BAD_VALUE);

    AIMapper* m = NULL;
    AIMapper* m2 = NULL;
    CHECK(load(&m) == AIMAPPER_ERROR_NONE && m != NULL);
    CHECK(load(&m2) == AIMAPPER_ERROR_NONE && m2 == m);
    CHECK(m->version == *mv);
    CHECK(m->v5.importBuffer && m->v5.getReservedRegion && m->v5.dumpAllBuffers);

    VnpuBufferDescriptorInfo info;
    memset(&info, 0, sizeof info);
    strcpy(info.name, "c-client");
    info.width = 64;
    info.height = 16;
    info.layerCount = 1;
    info.format = 1; /* RGBA_8888 */
    info.usage = 0x33; /* CPU_READ_OFTEN | CPU_WRITE_OFTEN */
    info.reservedSize = 64;
    native_handle_t* raw = NULL;
    uint32_t stride = 0;
    CHECK(alloc(&info, 1, &stride, &raw) == AIMAPPER_ERROR_NONE);
    CHECK(raw != NULL && stride >= 64 && raw->version == 12 && raw->numFds == 2);
    info.usage |= 1ull << 40; /* unknown bit */
    native_handle_t* bad = NULL;
    CHECK(alloc(&info, 1, &stride, &bad) == AIMAPPER_ERROR_BAD_DESCRIPTOR);
    info.usage = 0x33;

    buffer_handle_t h = NULL;
    CHECK(m->v5.importBuffer(NULL, &h) == AIMAPPER_ERROR_BAD_BUFFER);
    CHECK(m->v5.importBuffer(raw, &h) == AIMAPPER_ERROR_NONE && h != NULL && h != raw);
    uint32_t nfds = 0, nints = 0;
    CHECK(m->v5.getTransportSize(h, &nfds, &nints) == AIMAPPER_ERROR_NONE);
    CHECK(nfds == (uint32_t)raw->numFds && nints == (uint32_t)raw->numInts);

    ARect all = {0, 0, 64, 16};
    void* data = NULL;
    CHECK(m->v5.lock(h, 0x30, all, -1, &data) == AIMAPPER_ERROR_NONE && data != NULL);
    for (int y = 0; y < 16; y++) memset((uint8_t*)data + (size_t)y * stride * 4, y + 1, 64 * 4);
    int fence = -2;
    CHECK(m->v5.unlock(h, &fence) == AIMAPPER_ERROR_NONE && fence == -1);
    CHECK(m->v5.unlock(h, &fence) == AIMAPPER_ERROR_BAD_BUFFER);
    CHECK(m->v5.flushLockedBuffer(h) == AIMAPPER_ERROR_BAD_BUFFER);

    ARect big = {0, 0, 65, 16};
    CHECK(m->v5.lock(h, 0x3, big, -1, &data) == AIMAPPER_ERROR_BAD_VALUE);
    CHECK(m->v5.lock(h, 0x3, all, -1, &data) == AIMAPPER_ERROR_NONE);
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 64 * 4; x++) CHECK(((uint8_t*)data)[(size_t)y * stride * 4 + x] == y + 1);
    CHECK(m->v5.rereadLockedBuffer(h) == AIMAPPER_ERROR_NONE);
    CHECK(m->v5.unlock(h, &fence) == AIMAPPER_ERROR_NONE);

    /* Metadata: WIDTH (3) size query then read. */
    int32_t need = m->v5.getStandardMetadata(h, 3, NULL, 0);
    CHECK(need == 77);
    uint8_t buf[512];
    CHECK(m->v5.getStandardMetadata(h, 3, buf, sizeof buf) == 77);
    uint64_t width = 0;
    memcpy(&width, buf + 69, 8);
    CHECK(width == 64);
    CHECK(m->v5.getStandardMetadata(h, 99, buf, sizeof buf) == -AIMAPPER_ERROR_UNSUPPORTED);
    CHECK(m->v5.getStandardMetadata(NULL, 3, buf, sizeof buf) == -AIMAPPER_ERROR_BAD_BUFFER);

    /* Set BLEND_MODE (18) = PREMULTIPLIED (2) and DATASPACE (17); read back. */
    size_t n = encode_i32(buf, 18, 2);
    CHECK(m->v5.setStandardMetadata(h, 18, buf, n) == AIMAPPER_ERROR_NONE);
    n = encode_i32(buf, 17, 0x088A0000);
    AIMapper_MetadataType ds = {kStd, 17};
    CHECK(m->v5.setMetadata(h, ds, buf, n) == AIMAPPER_ERROR_NONE);
    uint8_t out[128];
    CHECK(m->v5.getStandardMetadata(h, 18, out, sizeof out) == 73);
    int32_t v = 0;
    memcpy(&v, out + 69, 4);
    CHECK(v == 2);
    CHECK(m->v5.getMetadata(h, ds, out, sizeof out) == 73);
    memcpy(&v, out + 69, 4);
    CHECK(v == 0x088A0000);
    /* WIDTH is constant: BAD_VALUE. Malformed: UNSUPPORTED. */
    n = encode_i32(buf, 3, 1);
    CHECK(m->v5.setStandardMetadata(h, 3, buf, n) == AIMAPPER_ERROR_BAD_VALUE);
    n = encode_i32(buf, 18, 1);
    CHECK(m->v5.setStandardMetadata(h, 18, buf, n - 1) == AIMAPPER_ERROR_UNSUPPORTED);

    const AIMapper_MetadataTypeDescription* list = NULL;
    size_t count = 0;
    CHECK(m->v5.listSupportedMetadataTypes(&list, &count) == AIMAPPER_ERROR_NONE);
    CHECK(list != NULL && count >= 23);

    void* reserved = NULL;
    uint64_t rsize = 0;
    CHECK(m->v5.getReservedRegion(h, &reserved, &rsize) == AIMAPPER_ERROR_NONE);
    CHECK(reserved != NULL && rsize == 64);
    memset(reserved, 0xAB, 64);

    CHECK(m->v5.freeBuffer(h) == AIMAPPER_ERROR_NONE);
    CHECK(m->v5.freeBuffer(h) == AIMAPPER_ERROR_BAD_BUFFER);
    CHECK(m->v5.freeBuffer(raw) == AIMAPPER_ERROR_BAD_BUFFER);
    del(raw);
    printf("C ABI OK\n");
    return 0;
}
