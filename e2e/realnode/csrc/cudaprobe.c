/* The real-node scenario's CUDA program, dynamically linked against libcuda.so.1 (DT_NEEDED, no
 * RUNPATH: the image holds no driver library, so the loader finds the one the claim's CDI spec
 * mounts from the node's driver root, the fake driver of native/vgpu/tests/fake), and
 * /etc/ld.so.preload brings libvgpu.so in. Usage: cudaprobe [CHUNK_MIB [HOLD_S [PROGRAM]]].
 * It prints, one "key=value" a line: the CUDA_* environment, each mapped object with "vgpu",
 * "libcuda" or "libnvidia" in its path, /etc/ld.so.preload, cuMemGetInfo's total, then allocates
 * CHUNK_MIB chunks (default 64) until the driver refuses: allocated_mib and the refusing call's
 * error code (2 is CUDA_ERROR_OUT_OF_MEMORY); then it runs PROGRAM (no arguments; its output
 * follows, then program_status=its exit status) and holds what it got for HOLD_S seconds
 * (default 0), so two pods can be seen holding their shares at once. Exit status 0 when it ran to
 * a refusal or 64 GiB. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice device);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes);

extern char **environ;

static void print_file(const char *key, const char *path) {
    FILE *f = fopen(path, "r");
    char line[4096];
    if (f == NULL) {
        printf("%s=(absent)\n", key);
        return;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        printf("%s=%s\n", key, line);
    }
    fclose(f);
}

static void print_maps(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    char last[4096] = "";
    while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
        char *path = strchr(line, '/');
        int wanted = path != NULL && (strstr(path, "vgpu") != NULL ||
                                      strstr(path, "libcuda") != NULL ||
                                      strstr(path, "libnvidia") != NULL);
        if (!wanted || strcmp(path, last) == 0) {
            continue;
        }
        snprintf(last, sizeof last, "%s", path);
        printf("mapped=%s", path);
    }
    if (maps != NULL) {
        fclose(maps);
    }
}

/* PROGRAM's output goes to our stdout after ours; its exit status (or -1: not run) follows. */
static void run_program(const char *program) {
    char *const args[] = {(char *)program, NULL};
    pid_t pid;
    int status = 0;
    if (posix_spawn(&pid, program, NULL, NULL, args, environ) != 0 ||
        waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        printf("program_status=-1\n");
    } else {
        printf("program_status=%d\n", WEXITSTATUS(status));
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    size_t chunk_mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "CUDA_", 5) == 0) {
            printf("env.%s\n", *e);
        }
    }
    print_file("preload", "/etc/ld.so.preload");
    print_maps();
    CUdevice device = 0;
    CUcontext ctx = NULL;
    CUresult rc = cuInit(0);
    if (rc == 0) rc = cuDeviceGet(&device, 0);
    if (rc == 0) rc = cuCtxCreate_v2(&ctx, 0, device);
    printf("init_error=%d\n", rc);
    if (rc != 0) {
        fflush(stdout);
        return 1;
    }
    size_t free_bytes = 0, total_bytes = 0;
    rc = cuMemGetInfo_v2(&free_bytes, &total_bytes);
    printf("meminfo_error=%d\ntotal_mib=%zu\n", rc, total_bytes >> 20);
    size_t allocated = 0;
    CUdeviceptr ptr = 0;
    for (rc = 0; rc == 0 && allocated < (64ULL << 10);) {
        rc = cuMemAlloc_v2(&ptr, chunk_mib << 20);
        if (rc == 0) allocated += chunk_mib;
    }
    printf("allocated_mib=%zu\nalloc_error=%d\n", allocated, rc);
    fflush(stdout);
    if (argc > 3) {
        run_program(argv[3]);
    }
    if (argc > 2) {
        sleep((unsigned int)atoi(argv[2]));
    }
    return 0;
}
