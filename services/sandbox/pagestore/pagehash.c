/*
 * Page hashing for incremental checkpoints: XXH3-64 (seed 0, default secret) of every 4 KiB
 * page, 0 for an all-zero page, holes of a memory file skipped without touching them.
 *
 * Must give exactly what services/sandbox/pagestore/hashing.py:naive_page_hashes gives
 * (python-xxhash's xxh3_64_intdigest per page, 0 for zero pages, 1 where a non-zero page
 * would hash to 0); tests/sandbox/test_pagestore.py compares the two.
 *
 * Built at first use with `gcc -O3 -march=native -shared -fPIC` into the sandbox cache and
 * loaded through ctypes (no Python headers needed).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define PAGE 4096
#define STRIPE 64
#define SECRET_SIZE 192
#define P32_1 0x9E3779B1U
#define P32_2 0x85EBCA77U
#define P32_3 0xC2B2AE3DU
#define P64_1 0x9E3779B185EBCA87ULL
#define P64_2 0xC2B2AE3D27D4EB4FULL
#define P64_3 0x165667B19E3779F9ULL
#define P64_4 0x85EBCA77C2B2AE63ULL
#define P64_5 0x27D4EB2F165667C5ULL
#define PMX1 0x165667919E3779F9ULL

static const uint8_t kSecret[SECRET_SIZE] __attribute__((aligned(64))) = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void accumulate_512(uint64_t *restrict acc, const uint8_t *restrict in,
                                  const uint8_t *restrict sec) {
    for (int i = 0; i < 8; i++) {
        uint64_t v = rd64(in + 8 * i);
        uint64_t k = v ^ rd64(sec + 8 * i);
        acc[i ^ 1] += v;
        acc[i] += (uint64_t)(uint32_t)k * (k >> 32);
    }
}

static inline void scramble(uint64_t *acc, const uint8_t *sec) {
    for (int i = 0; i < 8; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= rd64(sec + 8 * i);
        a *= P32_1;
        acc[i] = a;
    }
}

static inline uint64_t mul_fold(uint64_t a, uint64_t b) {
    __uint128_t p = (__uint128_t)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static inline uint64_t avalanche(uint64_t h) {
    h ^= h >> 37;
    h *= PMX1;
    h ^= h >> 32;
    return h;
}

/* XXH3_64bits(page, 4096) with seed 0 and the default secret. */
static uint64_t xxh3_page(const uint8_t *in) {
    uint64_t acc[8] = {P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
    const int stripes_per_block = (SECRET_SIZE - STRIPE) / 8; /* 16 */
    const int block_len = STRIPE * stripes_per_block;         /* 1024 */
    const int nb_blocks = (PAGE - 1) / block_len;             /* 3 */
    for (int n = 0; n < nb_blocks; n++) {
        for (int s = 0; s < stripes_per_block; s++)
            accumulate_512(acc, in + n * block_len + s * STRIPE, kSecret + s * 8);
        scramble(acc, kSecret + SECRET_SIZE - STRIPE);
    }
    const int last_stripes = ((PAGE - 1) - block_len * nb_blocks) / STRIPE; /* 15 */
    for (int s = 0; s < last_stripes; s++)
        accumulate_512(acc, in + nb_blocks * block_len + s * STRIPE, kSecret + s * 8);
    accumulate_512(acc, in + PAGE - STRIPE, kSecret + SECRET_SIZE - STRIPE - 7);
    uint64_t r = (uint64_t)PAGE * P64_1;
    for (int i = 0; i < 4; i++)
        r += mul_fold(acc[2 * i] ^ rd64(kSecret + 11 + 16 * i), acc[2 * i + 1] ^ rd64(kSecret + 11 + 16 * i + 8));
    return avalanche(r);
}

static inline int is_zero(const uint8_t *p) {
    const uint64_t *w = (const uint64_t *)p;
    uint64_t acc = 0;
    /* early exit per 512 bytes: most non-zero pages differ in the first line */
    for (int i = 0; i < PAGE / 8; i += 64) {
        for (int j = 0; j < 64; j++) acc |= w[i + j];
        if (acc) return 0;
    }
    return 1;
}

static inline uint64_t page_hash(const uint8_t *p) {
    if (is_zero(p)) return 0;
    uint64_t h = xxh3_page(p);
    return h ? h : 1;
}

/* Hash npages consecutive pages of buf into out. Returns the number of non-zero pages. */
int64_t k3_hash_pages(const uint8_t *buf, int64_t npages, uint64_t *out) {
    int64_t nonzero = 0;
    for (int64_t i = 0; i < npages; i++) {
        out[i] = page_hash(buf + i * PAGE);
        nonzero += out[i] != 0;
    }
    return nonzero;
}

/* Hash the pages of a memory file mapped at map (MAP_SHARED of fd, npages long), skipping
 * holes (SEEK_DATA/SEEK_HOLE) so that reading never allocates pages of a sparse tmpfs file.
 * Pages in holes get hash 0. Returns the number of non-zero pages, or -1 on error. */
int64_t k3_hash_file(int fd, const uint8_t *map, int64_t npages, uint64_t *out) {
    int64_t nonzero = 0;
    off_t size = (off_t)npages * PAGE, pos = 0;
    memset(out, 0, (size_t)npages * sizeof *out);
    while (pos < size) {
        off_t data = lseek(fd, pos, SEEK_DATA);
        if (data < 0 || data >= size) break;
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || hole > size) hole = size;
        for (int64_t i = data / PAGE; i < (hole + PAGE - 1) / PAGE; i++) {
            out[i] = page_hash(map + i * PAGE);
            nonzero += out[i] != 0;
        }
        pos = hole;
    }
    return nonzero;
}

/* Copy pages: dst[dst_idx[i]] = src[src_idx[i]] (page-sized rows). */
void k3_gather_pages(uint8_t *dst, const int64_t *dst_idx, const uint8_t *src,
                     const int64_t *src_idx, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + dst_idx[i] * PAGE, src + src_idx[i] * PAGE, PAGE);
}
