/* The real-node priority test's CUDA program, dynamically linked against libcuda.so.1 (in the
 * test image, the fake driver, whose kernels keep its device busy for FAKE_CUDA_KERNEL_US), so
 * /etc/ld.so.preload brings libvgpu.so in. Usage: cudalaunch LAUNCH_S [LIVE_S].
 * One thread launches kernels back to back for LAUNCH_S seconds, then launches nothing more; a
 * second thread prints the launch count every 100 ms whether or not a launch is held. All times
 * are CLOCK_BOOTTIME milliseconds, one clock for every container of the node, so the test can
 * line two pods' outputs up. It prints, one "key=value" a line:
 *   env.CUDA_...=...        the CUDA_* environment
 *   uuid=GPU-...            device 0's UUID as libvgpu names its priority board
 *   init_error=N            the first failing setup call's error code (0: none)
 *   start_ms=T              just before the first launch
 *   tick=T N                every 100 ms: launches completed so far
 *   launch_error=N          a launch failed (then it stops launching)
 *   stopped_ms=T N          the last launch has returned; N launches in all
 * and lives LIVE_S seconds in all (default LAUNCH_S + 1), then exits 0 (1 if setup failed). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef struct {
    unsigned char bytes[16];
} CUuuid;
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice device);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream stream, void **params, void **extra);

extern char **environ;

static CUcontext ctx;
static CUfunction kernel;
static double launch_s;
static unsigned long launches; /* atomic */
static int launching = 1;      /* atomic */

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_line(const char *format, long long t, unsigned long n) {
    printf(format, t, n);
    fflush(stdout);
}

static void *launch_loop(void *unused) {
    long long until = now_ms() + (long long)(launch_s * 1000);
    CUresult rc = 0;
    (void)unused;
    /* the context is current per thread */
    if (cuCtxSetCurrent(ctx) != 0) {
        rc = -1;
    }
    printf("start_ms=%lld\n", now_ms());
    while (rc == 0 && now_ms() < until) {
        rc = cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        if (rc == 0) {
            __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
        }
    }
    if (rc != 0) {
        printf("launch_error=%d\n", rc);
    }
    __atomic_store_n(&launching, 0, __ATOMIC_RELEASE);
    print_line("stopped_ms=%lld %lu\n", now_ms(), __atomic_load_n(&launches, __ATOMIC_RELAXED));
    return NULL;
}

int main(int argc, char **argv) {
    launch_s = argc > 1 ? atof(argv[1]) : 5;
    double live_s = argc > 2 ? atof(argv[2]) : launch_s + 1;
    long long end = now_ms() + (long long)(live_s * 1000);
    static const char image[] = "fake module";
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "CUDA_", 5) == 0) {
            printf("env.%s\n", *e);
        }
    }
    CUdevice device = 0;
    CUuuid uuid;
    CUmodule module = NULL;
    CUresult rc = cuInit(0);
    if (rc == 0) rc = cuDeviceGet(&device, 0);
    if (rc == 0) rc = cuDeviceGetUuid(&uuid, device);
    if (rc == 0) rc = cuCtxCreate_v2(&ctx, 0, device);
    if (rc == 0) rc = cuModuleLoadData(&module, image);
    if (rc == 0) rc = cuModuleGetFunction(&kernel, module, "spin");
    if (rc == 0) {
        const unsigned char *b = uuid.bytes;
        printf("uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
               b[13], b[14], b[15]);
    }
    printf("init_error=%d\n", rc);
    fflush(stdout);
    pthread_t launcher;
    if (rc != 0 || pthread_create(&launcher, NULL, launch_loop, NULL) != 0) {
        return 1;
    }
    while (__atomic_load_n(&launching, __ATOMIC_ACQUIRE)) {
        print_line("tick=%lld %lu\n", now_ms(), __atomic_load_n(&launches, __ATOMIC_RELAXED));
        usleep(100 * 1000);
    }
    pthread_join(launcher, NULL);
    while (now_ms() < end) {
        usleep(100 * 1000);
    }
    return 0;
}
