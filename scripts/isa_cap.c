/*
 * isa_cap: makes chosen shared libraries see an AVX2-only x86 CPU (no AVX-512, no
 * AVX-VNNI), like the AMD EPYC AVX2 machines issue 27 measures against, on a CPU that
 * has more. scripts/litert_compare.py --isa avx2 builds it and loads it as an rtld audit
 * library (LD_AUDIT), so LiteRT's XNNPACK picks its AVX2 kernels while vnpu runs with
 * VNPU_ISA=avx2: both sides capped alike on one CPU.
 *
 * Why this way: XNNPACK reads the CPU's features with the CPUID and XGETBV instructions,
 * which user space can't intercept without CPUID faulting (absent on AMD and in most
 * VMs), and LiteRT has no switch for it. The loader calls la_objopen after mapping a
 * library and before running any of its code, so the library's CPUID and XGETBV sites
 * (their addresses, from objdump, in $VNPU_ISA_CAP_SITES) are overwritten there with UD2;
 * the SIGILL handler below runs the real instruction, clears the AVX-512 and AVX-VNNI
 * bits, and steps over the site.
 *
 * $VNPU_ISA_CAP_SITES: "name=c:HEX,x:HEX,...;name=..." where name is a library's file name,
 * c a CPUID site, x an XGETBV site, HEX the address objdump gives (relative to the load).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

enum { CPUID = 'c', XGETBV = 'x' };
struct site { uintptr_t addr; char kind; };
static struct site sites[512];
static int n_sites;
static volatile int emulated;

static void note(const char *s) { (void)!write(2, s, strlen(s)); }

unsigned int la_version(unsigned int v) { return v; }

/* Says, at exit, how many queries were answered (0 would mean the cap did nothing). */
__attribute__((destructor)) static void report(void) {
    if (n_sites == 0) return;
    char line[96];
    int n = snprintf(line, sizeof line, "isa_cap: %d CPUID/XGETBV queries answered as AVX2\n",
                     emulated);
    (void)!write(2, line, (size_t)n);
}

static void on_sigill(int sig, siginfo_t *info, void *ctx) {
    (void)sig; (void)info;
    greg_t *g = ((ucontext_t *)ctx)->uc_mcontext.gregs;
    uintptr_t rip = (uintptr_t)g[REG_RIP];
    for (int i = 0; i < n_sites; i++) {
        if (sites[i].addr != rip) continue;
        unsigned int a, b, c, d;
        if (sites[i].kind == CPUID) {
            unsigned int leaf = (unsigned int)g[REG_RAX], sub = (unsigned int)g[REG_RCX];
            __cpuid_count(leaf, sub, a, b, c, d);
            if (leaf == 7 && sub == 0) {
                /* EBX: F, DQ, IFMA, PF, ER, CD, BW, VL. */
                b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) |
                       (1u << 28) | (1u << 30) | (1u << 31));
                /* ECX: VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ. */
                c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
                /* EDX: 4VNNIW, 4FMAPS, VP2INTERSECT, FP16. */
                d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23));
            } else if (leaf == 7 && sub == 1) {
                a &= ~((1u << 4) | (1u << 5)); /* AVX-VNNI, AVX512_BF16 */
            } else if (leaf == 0xd && sub == 0) {
                a &= ~0xe0u; /* the opmask and ZMM state components */
            }
            g[REG_RAX] = a; g[REG_RBX] = b; g[REG_RCX] = c; g[REG_RDX] = d;
            g[REG_RIP] = (greg_t)(rip + 2);
        } else {
            unsigned int which = (unsigned int)g[REG_RCX];
            __asm__ volatile("xgetbv" : "=a"(a), "=d"(d) : "c"(which));
            if (which == 0) a &= ~0xe0u; /* the OS saves no AVX-512 state */
            g[REG_RAX] = a; g[REG_RDX] = d;
            g[REG_RIP] = (greg_t)(rip + 3);
        }
        emulated++;
        return;
    }
    /* A real illegal instruction: die of it as the program would have. */
    signal(SIGILL, SIG_DFL);
}

/* The entry of $VNPU_ISA_CAP_SITES for the library `path`, or NULL. */
static const char *entry_for(const char *path) {
    const char *all = getenv("VNPU_ISA_CAP_SITES");
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    for (const char *e = all; e && *e; ) {
        if (strncmp(e, base, n) == 0 && e[n] == '=') return e + n + 1;
        e = strchr(e, ';');
        if (e) e++;
    }
    return NULL;
}

static int patch(uintptr_t at, char kind) {
    static const unsigned char cpuid[] = {0x0f, 0xa2}, xgetbv[] = {0x0f, 0x01, 0xd0};
    const unsigned char *want = kind == CPUID ? cpuid : xgetbv;
    size_t len = kind == CPUID ? 2 : 3;
    if (memcmp((const void *)at, want, len) != 0 || n_sites == 512) return -1;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = at & ~(page - 1), last = (at + 1) & ~(page - 1);
    size_t span = last - first + page; /* the pages UD2's two bytes fall on */
    if (mprotect((void *)first, span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return -1;
    ((unsigned char *)at)[0] = 0x0f; /* UD2 */
    ((unsigned char *)at)[1] = 0x0b;
    mprotect((void *)first, span, PROT_READ | PROT_EXEC);
    sites[n_sites].addr = at;
    sites[n_sites].kind = kind;
    n_sites++;
    return 0;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
    (void)lmid; (void)cookie;
    const char *e = entry_for(map->l_name);
    if (!e) return 0;
    static int handler;
    if (!handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigill;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGILL, &sa, NULL);
        handler = 1;
    }
    int bad = 0;
    while (*e && *e != ';') {
        char kind = *e;
        char *end;
        uintptr_t off = (uintptr_t)strtoull(e + 2, &end, 16);
        bad |= patch(map->l_addr + off, kind);
        e = *end == ',' ? end + 1 : end;
    }
    note(bad ? "isa_cap: a site did not hold the instruction named; left as it was\n"
             : "");
    return 0;
}
